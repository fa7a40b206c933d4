package engine

import (
	"context"
	"encoding/json"
	"log/slog"
)

// Actor is who asks for an admin action: the web site puts one into every
// request's context, and the engine records it on the events the action
// writes and in its log.
type Actor struct {
	// Name is the user: the HTTP Basic user name, the session's role for
	// a site login, "local" on a site without login.
	Name string `json:"name"`
	// Role is the access the actor has: "admin" or "readonly".
	Role string `json:"role,omitempty"`
	// Addr is the network address the request came from.
	Addr string `json:"addr,omitempty"`
}

// EmbeddedActor is the actor recorded for admin actions called from Go
// code whose context carries no Actor.
var EmbeddedActor = Actor{Name: "embedded"}

type actorKey struct{}

// WithActor returns ctx carrying a, the actor of the admin actions called
// with it.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the actor ctx carries, and whether it carries one.
func ActorFrom(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok
}

// actorOf returns the actor of ctx, EmbeddedActor when it carries none.
func actorOf(ctx context.Context) Actor {
	if a, ok := ActorFrom(ctx); ok {
		return a
	}
	return EmbeddedActor
}

// actionDetail is the event detail of an admin action: why, and who asked.
func actionDetail(ctx context.Context, reason string) json.RawMessage {
	b, _ := json.Marshal(struct {
		Reason string `json:"reason"`
		Actor  Actor  `json:"actor"`
	}{reason, actorOf(ctx)})
	return b
}

// audit logs an admin action that succeeded (one INFO line with the
// action, its target and who asked); a failed one is left to the caller's
// error handling. Use it deferred, with the action's error.
func (e *Engine) audit(ctx context.Context, err *error, action string, target ...slog.Attr) {
	if *err != nil {
		return
	}
	a := actorOf(ctx)
	attrs := append([]slog.Attr{slog.String("action", action)}, target...)
	attrs = append(attrs, slog.String("actor", a.Name), slog.String("role", a.Role), slog.String("addr", a.Addr))
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "admin action", attrs...)
}
