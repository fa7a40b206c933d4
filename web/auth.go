package web

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/templates"
)

// Roles.
const (
	roleAdmin    = "admin"
	roleReadonly = "readonly"
)

// localUser is the actor name of requests to a site without login.
const localUser = "local"

const (
	sessionCookie = "cairn_session"
	csrfField     = "csrf_token"
	csrfHeader    = "X-CSRF-Token"
	maxFormBytes  = 4 << 20
)

// auth signs and checks stateless session tokens and CSRF tokens.
//
// A session token is "role.expiry.nonce.mac" where mac is an HMAC-SHA256
// of the rest under a key derived from the session secret and both
// passwords, so changing a password ends every session. The CSRF token of
// a session is an HMAC of its token.
type auth struct {
	key      []byte
	admin    string
	readonly string
	ttl      time.Duration
	clock    func() time.Time
}

func newAuth(secret []byte, admin, readonly string, ttl time.Duration, clock func() time.Time) *auth {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "cairn-session\x00%s\x00%s", admin, readonly)
	return &auth{key: m.Sum(nil), admin: admin, readonly: readonly, ttl: ttl, clock: clock}
}

// enabled reports whether a login is required.
func (a *auth) enabled() bool { return a.admin != "" }

func (a *auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue returns a new session token for role.
func (a *auth) issue(role string) string {
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce)
	payload := role + "." + strconv.FormatInt(a.clock().Add(a.ttl).Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(nonce)
	return payload + "." + a.mac("session", payload)
}

// verify returns the role of a valid, unexpired token.
func (a *auth) verify(token string) (string, bool) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", false
	}
	payload, mac := token[:i], token[i+1:]
	if !hmac.Equal([]byte(mac), []byte(a.mac("session", payload))) {
		return "", false
	}
	parts := strings.Split(payload, ".")
	if len(parts) != 3 {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || a.clock().Unix() >= exp {
		return "", false
	}
	switch parts[0] {
	case roleAdmin, roleReadonly:
		return parts[0], true
	}
	return "", false
}

// csrf returns the CSRF token bound to a session token.
func (a *auth) csrf(token string) string { return a.mac("csrf", token) }

// checkPassword returns the role a password logs in as. Both comparisons
// always run, in constant time.
func (a *auth) checkPassword(pw string) (string, bool) {
	isAdmin := a.admin != "" && subtle.ConstantTimeCompare([]byte(pw), []byte(a.admin)) == 1
	isRO := a.readonly != "" && subtle.ConstantTimeCompare([]byte(pw), []byte(a.readonly)) == 1
	switch {
	case isAdmin:
		return roleAdmin, true
	case isRO:
		return roleReadonly, true
	}
	return "", false
}

// session is who makes a request.
type session struct {
	role string
	// user is who the actor is in the audit trail: the HTTP Basic user
	// name, the role for a login session, "local" without login.
	user  string
	token string // the cookie's token; "" when authenticated by header
	// header is set when the request authenticated with an Authorization
	// header (API clients): no ambient credential, so no CSRF token.
	header bool
}

func (s *session) canWrite() bool { return s != nil && s.role == roleAdmin }

type sessionKey struct{}

func sessionFrom(ctx context.Context) *session {
	sess, _ := ctx.Value(sessionKey{}).(*session)
	return sess
}

func (s *Server) setSessionCookie(w http.ResponseWriter, r *http.Request, token string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: token, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
}

// isPage reports whether a path is an HTML page (not an asset, API,
// fragment, websocket or metrics endpoint).
func isPage(path string) bool {
	for _, p := range []string{"/static/", "/api/", "/fragments/"} {
		if strings.HasPrefix(path, p) {
			return false
		}
	}
	return path != "/ws" && path != "/metrics" && path != "/healthz" && !isCallback(path)
}

// isPublic reports whether a path is served without a session.
func isPublic(path string) bool {
	return path == "/login" || path == "/healthz" || path == openAPIPath || strings.HasPrefix(path, "/static/") || isCallback(path)
}

// authenticate finds the request's session: a valid session cookie, or
// HTTP Basic credentials (for API clients and Prometheus), or, when no
// password is configured, an anonymous admin session (minted as a cookie
// so that CSRF tokens have something to bind to). Requests without one
// get 401 (API, websocket, metrics, fragments) or a redirect to /login.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sess *session
		if c, err := r.Cookie(sessionCookie); err == nil {
			if role, ok := s.auth.verify(c.Value); ok {
				sess = &session{role: role, token: c.Value}
			}
		}
		if sess == nil && s.auth.enabled() {
			if _, pw, ok := r.BasicAuth(); ok {
				ip := remoteIP(r)
				if wait := s.logins.wait(ip); wait > 0 {
					s.tooManyLogins(w, r, wait)
					return
				}
				if role, ok := s.auth.checkPassword(pw); ok {
					user, _, _ := r.BasicAuth()
					sess = &session{role: role, user: cmp.Or(user, role), header: true}
				} else {
					s.logins.fail(ip)
				}
			}
		}
		if sess == nil && !s.auth.enabled() {
			// Everyone is admin. A browser gets an anonymous session
			// cookie on its first page, so forms carry a CSRF token.
			sess = &session{role: roleAdmin, user: localUser}
			if r.Method == http.MethodGet && isPage(r.URL.Path) {
				sess.token = s.auth.issue(roleAdmin)
				s.setSessionCookie(w, r, sess.token, 0)
			}
		}
		if sess == nil && !isPublic(r.URL.Path) {
			s.unauthenticated(w, r)
			return
		}
		if sess != nil {
			if sess.user == "" {
				sess.user = sess.role
				if !s.auth.enabled() {
					sess.user = localUser
				}
			}
			ctx := context.WithValue(r.Context(), sessionKey{}, sess)
			ctx = engine.WithActor(ctx, engine.Actor{Name: sess.user, Role: sess.role, Addr: r.RemoteAddr})
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) unauthenticated(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/api/"):
		w.Header().Set("WWW-Authenticate", `Basic realm="cairn"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "login required: send the session cookie or HTTP Basic credentials"})
	case p == "/ws" || p == "/metrics" || strings.HasPrefix(p, "/fragments/") || r.Method != http.MethodGet:
		http.Error(w, "login required", http.StatusUnauthorized)
	default:
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusFound)
	}
}

// isWrite reports whether a request may change state.
func isWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// guardWrites rejects state-changing requests (403) that come from
// another origin, from the read-only role, or without the session's CSRF
// token. Login needs no token (there is no session yet) and logout is
// allowed to everyone. API clients that authenticate with an
// Authorization header need no token; with no password configured, API
// requests without a session cookie need none either when they send JSON,
// which a cross-site form cannot. A request that no route of mux takes
// goes straight to the catch-all (a 404 or 405 that changes nothing), so
// a wrong method is answered 405 rather than 403.
func (s *Server) guardWrites(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isWrite(r) || isCatchAll(mux, r) || isCallback(r.URL.Path) { // a callback's token is its permission
			mux.ServeHTTP(w, r)
			return
		}
		if !s.sameOrigin(r) {
			s.forbidden(w, r, "cross-origin request refused")
			return
		}
		if r.URL.Path == "/login" {
			mux.ServeHTTP(w, r)
			return
		}
		sess := sessionFrom(r.Context())
		if !s.csrfOK(r, sess) {
			s.forbidden(w, r, csrfRefusal(r))
			return
		}
		if r.URL.Path != "/logout" && !sess.canWrite() {
			s.forbidden(w, r, "read-only access: this action needs the admin login")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) csrfOK(r *http.Request, sess *session) bool {
	if sess == nil {
		return false
	}
	if sess.header {
		return true
	}
	if !s.auth.enabled() && strings.HasPrefix(r.URL.Path, "/api/") {
		if _, err := r.Cookie(sessionCookie); err != nil && isJSON(r) {
			return true
		}
	}
	if sess.token == "" {
		return false
	}
	got := r.Header.Get(csrfHeader)
	if got == "" {
		r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
		got = r.PostFormValue(csrfField)
	}
	want := s.auth.csrf(sess.token)
	return got != "" && hmac.Equal([]byte(got), []byte(want))
}

// csrfRefusal says why guardWrites refused a write that csrfOK did not
// pass. The page's advice suits a browser; a request to the API with no
// session cookie that is not a browser's form submission comes from an
// API client, which is told how to send a write instead. Only the message
// differs: the request is refused either way.
func csrfRefusal(r *http.Request) string {
	_, cookieErr := r.Cookie(sessionCookie)
	if strings.HasPrefix(r.URL.Path, "/api/") && cookieErr != nil && r.Header.Get("Sec-Fetch-Mode") != "navigate" {
		sent := "no Content-Type"
		if ct := r.Header.Get("Content-Type"); ct != "" {
			sent = "Content-Type " + strconv.Quote(ct)
		}
		return "the API takes requests with Content-Type: application/json (or HTTP Basic credentials when the site has a password); this one has " + sent
	}
	return "missing or invalid CSRF token: reload the page and try again"
}

func isJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// sameOrigin reports whether the request's Origin (when it has one) is
// this site, or one of Config.AllowedOrigins.
func (s *Server) sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if s.origins[strings.ToLower(origin)] {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

func (s *Server) forbidden(w http.ResponseWriter, r *http.Request, msg string) {
	s.log.DebugContext(r.Context(), "request refused", slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("reason", msg), slog.String("remote", r.RemoteAddr))
	err := &httpError{status: http.StatusForbidden, msg: msg}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		s.apiFail(w, r, err)
		return
	}
	s.fail(w, r, err)
}

// page builds the layout data of a page for the request's session.
func (s *Server) page(w http.ResponseWriter, r *http.Request, title, nav string) templates.Page {
	sess := sessionFrom(r.Context())
	p := templates.Page{
		Title: title, Nav: nav, AuthEnabled: s.auth.enabled(),
		CSSURL: assetURL("app.css"), JSURL: assetURL("app.js"),
	}
	if sess != nil {
		p.Role = sess.role
		p.CanWrite = sess.canWrite()
		if sess.token != "" {
			p.CSRF = s.auth.csrf(sess.token)
		}
	}
	if w != nil {
		p.Flash = takeFlash(w, r)
	}
	return p
}

// csrfFor returns the CSRF token of the request's session.
func (s *Server) csrfFor(r *http.Request) string {
	if sess := sessionFrom(r.Context()); sess != nil && sess.token != "" {
		return s.auth.csrf(sess.token)
	}
	return ""
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"), "/")
	if !s.auth.enabled() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if _, ok := s.auth.verify(c.Value); ok {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
	}
	s.render(w, r, http.StatusOK, templates.LoginPage(templates.LoginView{Page: s.page(nil, r, "Log in", ""), Next: next}))
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	next := localPath(r.PostFormValue("next"), "/")
	if !s.auth.enabled() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	ip := remoteIP(r)
	if wait := s.logins.wait(ip); wait > 0 {
		s.tooManyLogins(w, r, wait)
		return
	}
	role, ok := s.auth.checkPassword(r.PostFormValue("password"))
	if !ok {
		s.logins.fail(ip)
		s.log.WarnContext(r.Context(), "failed login", slog.String("remote", r.RemoteAddr))
		s.render(w, r, http.StatusUnauthorized, templates.LoginPage(templates.LoginView{
			Page: s.page(nil, r, "Log in", ""), Next: next, Error: "Wrong password."}))
		return
	}
	s.logins.reset(ip)
	s.log.InfoContext(r.Context(), "login", slog.String("role", role), slog.String("remote", r.RemoteAddr))
	s.setSessionCookie(w, r, s.auth.issue(role), int(s.auth.ttl/time.Second))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	s.setSessionCookie(w, r, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// localPath returns p when it is a clean path on this site, else def: it
// never lets a redirect leave the site. Browsers drop tabs and newlines
// from a URL and read a backslash as a slash, so "/\t/evil" or "/\\evil"
// would lead to //evil: p must be valid UTF-8, start with a single "/",
// and hold no backslash, whitespace or control character, neither as
// written nor once percent-decoded; it must parse as a bare path (no
// scheme, no host).
func localPath(p, def string) string {
	if !cleanLocal(p) {
		return def
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return def
	}
	if dec, err := url.PathUnescape(u.EscapedPath()); err != nil || !cleanLocal(dec) {
		return def
	}
	return p
}

// cleanLocal reports whether p starts with one slash and holds no
// backslash, whitespace or control character, and is valid UTF-8.
func cleanLocal(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || !utf8.ValidString(p) {
		return false
	}
	for _, c := range p {
		if c == '\\' || unicode.IsSpace(c) || unicode.IsControl(c) || c == utf8.RuneError {
			return false
		}
	}
	return true
}

// Failed logins allowed per client address and window.
const (
	loginFailLimit  = 10
	loginFailWindow = 5 * time.Minute
)

// loginLimiter slows password guessing: after loginFailLimit failures
// from one address within loginFailWindow, that address may not try again
// until the window ends. Behind a proxy every client shares the proxy's
// address.
type loginLimiter struct {
	clock func() time.Time
	mu    sync.Mutex
	fails map[string]loginFails
}

type loginFails struct {
	n     int
	since time.Time
}

func (l *loginLimiter) blocked(ip string) bool { return l.wait(ip) > 0 }

// wait returns how long ip must wait before it may try again (0: it may).
func (l *loginLimiter) wait(ip string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.fails[ip]
	if !ok || f.n < loginFailLimit {
		return 0
	}
	return max(loginFailWindow-l.clock().Sub(f.since), 0)
}

// tooManyLogins answers a request from an address that failed to log in
// too often: 429 with Retry-After (whole seconds, rounded up), as JSON on
// the API.
func (s *Server) tooManyLogins(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	s.log.WarnContext(r.Context(), "login refused: too many failures", slog.String("remote", r.RemoteAddr))
	w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	const msg = "too many failed logins: wait a few minutes"
	if strings.HasPrefix(r.URL.Path, "/api/") {
		s.apiFail(w, r, &httpError{status: http.StatusTooManyRequests, msg: msg})
		return
	}
	if r.URL.Path == "/login" {
		s.render(w, r, http.StatusTooManyRequests, templates.LoginPage(templates.LoginView{
			Page: s.page(nil, r, "Log in", ""), Next: localPath(r.PostFormValue("next"), "/"), Error: "Too many failed attempts: wait a few minutes."}))
		return
	}
	http.Error(w, msg, http.StatusTooManyRequests)
}

func (l *loginLimiter) fail(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	if l.fails == nil {
		l.fails = map[string]loginFails{}
	}
	if len(l.fails) > 10000 { // forget old windows
		for k, f := range l.fails {
			if now.Sub(f.since) >= loginFailWindow {
				delete(l.fails, k)
			}
		}
	}
	f := l.fails[ip]
	if now.Sub(f.since) >= loginFailWindow {
		f = loginFails{since: now}
	}
	f.n++
	l.fails[ip] = f
}

func (l *loginLimiter) reset(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.fails, ip)
}

func remoteIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
