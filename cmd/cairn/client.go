package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// requestTimeout bounds one API request (not `cairn watch`).
const requestTimeout = 30 * time.Second

// maxResponse caps the API answer read into memory.
const maxResponse = 64 << 20

// client calls the server's JSON API with HTTP Basic credentials, asking
// for the password on the terminal the first time the server wants one
// when CAIRN_PASSWORD is not set.
type client struct {
	base     *url.URL // scheme, host and path prefix, without trailing "/"
	hc       *http.Client
	user     string
	password string
	prompt   func() (string, error) // nil: no terminal to ask on
	asked    bool                   // password is the one typed at the prompt
	askErr   error                  // why the prompt gave no password
}

func newClient(base *url.URL, user, password string, prompt func() (string, error)) *client {
	return &client{base: base, hc: &http.Client{Timeout: requestTimeout}, user: user, password: password, prompt: prompt}
}

// apiError is an answer of the API other than 2xx: its status and the
// message it gave.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// endpoint returns the URL of an API path ("/api/runs") with query q.
func (c *client) endpoint(path string, q url.Values) string {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	return u.String()
}

// call sends a request and returns the body of a 2xx answer. body, when
// not nil, is sent as JSON. A 401 without a password asks for one (once)
// and sends the request again: the refused request changed nothing.
func (c *client) call(ctx context.Context, method, path string, q url.Values, body any) ([]byte, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
	}
	for {
		res, err := c.send(ctx, method, c.endpoint(path, q), payload)
		if err != nil {
			return nil, err
		}
		if res.StatusCode == http.StatusUnauthorized && c.askPassword() {
			res.Body.Close()
			continue
		}
		return c.read(res)
	}
}

func (c *client) send(ctx context.Context, method, target string, payload []byte) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("build request %s %s: %w", method, target, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "cairn-cli")
	if payload != nil {
		// The server needs a JSON content type on writes without a session.
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req.Header)
	res, err := c.hc.Do(req)
	if err != nil {
		err = c.netError(ctx, err)
		cancel()
		return nil, err
	}
	res.Body = cancelOnClose{res.Body, cancel}
	return res, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// authorize adds the Basic credentials when there is a password.
func (c *client) authorize(h http.Header) {
	if c.password != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(c.user+":"+c.password)))
	}
}

// askPassword asks for the password on the terminal, once, when none was
// given. It reports whether there is a new password to try.
func (c *client) askPassword() bool {
	if c.password != "" || c.prompt == nil || c.asked {
		return false
	}
	c.asked = true
	pw, err := c.prompt()
	if err != nil {
		c.askErr = err
		return false
	}
	if pw == "" {
		return false
	}
	c.password = pw
	return true
}

// netError says in the user's terms why the server could not be reached.
func (c *client) netError(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return errors.New("interrupted")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s did not answer within %s", c.base.Redacted(), requestTimeout)
	}
	return fmt.Errorf("cannot reach %s: %w", c.base.Redacted(), err)
}

// read returns the body of a 2xx answer, or the API's error.
func (c *client) read(res *http.Response) ([]byte, error) {
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("read the answer of %s: %w", c.base.Redacted(), err)
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return b, nil
	}
	return nil, c.statusError(res.StatusCode, b)
}

// statusError turns a refused request into the API's message.
func (c *client) statusError(status int, body []byte) error {
	if status == http.StatusUnauthorized {
		switch {
		case c.asked && c.password != "":
			return &apiError{status: status, msg: "wrong password: the server refused it"}
		case c.password != "":
			return &apiError{status: status, msg: "wrong password: the server refused it (CAIRN_PASSWORD)"}
		case c.askErr != nil:
			return &apiError{status: status, msg: "the server wants a password: set CAIRN_PASSWORD (" + c.askErr.Error() + ")"}
		}
		return &apiError{status: status, msg: "the server wants a password: set CAIRN_PASSWORD (or run cairn on a terminal to be asked)"}
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return &apiError{status: status, msg: e.Error}
	}
	// Not the API's JSON (a proxy, or a server that is not Cairn's).
	text := strings.TrimSpace(string(body))
	if len(text) > 200 || strings.HasPrefix(text, "<") {
		text = ""
	}
	msg := fmt.Sprintf("%s answered %d %s", c.base.Redacted(), status, http.StatusText(status))
	if text != "" {
		msg += ": " + text
	}
	return &apiError{status: status, msg: msg}
}

// get GETs an API path.
func (c *client) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	return c.call(ctx, http.MethodGet, path, q, nil)
}

// post POSTs body as JSON to an API path.
func (c *client) post(ctx context.Context, path string, body any) ([]byte, error) {
	if body == nil {
		body = struct{}{}
	}
	return c.call(ctx, http.MethodPost, path, nil, body)
}
