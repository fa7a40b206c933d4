package web

import "time"

// RoutePatterns returns the patterns of s's routes, in registration order.
func RoutePatterns(s *Server) []string { return s.patterns }

// HeldHorizon returns how long a transaction holds back vacuum before
// s's attention list shows it.
func HeldHorizon(s *Server) time.Duration { return s.heldHorizon }
