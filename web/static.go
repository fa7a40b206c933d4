package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
)

//go:embed static
var staticFiles embed.FS

// assetVersions maps each embedded asset to a hash of its content, used
// as a version query so that browsers may cache assets for long.
var assetVersions = func() map[string]string {
	out := map[string]string{}
	_ = fs.WalkDir(staticFiles, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := staticFiles.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[path[len("static/"):]] = hex.EncodeToString(sum[:6])
		return nil
	})
	return out
}()

// assetURL returns the versioned URL of an embedded asset.
func assetURL(name string) string { return "/static/" + name + "?v=" + assetVersions[name] }

func staticHandler() http.Handler {
	sub, _ := fs.Sub(staticFiles, "static")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := assetVersions[r.URL.Path]; !ok {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("v") != "" {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
		files.ServeHTTP(w, r)
	})
}
