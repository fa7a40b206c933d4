package web

// RoutePatterns returns the patterns of s's routes, in registration order.
func RoutePatterns(s *Server) []string { return s.patterns }
