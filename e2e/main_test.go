// Package e2e holds Cairn's black-box tests: real processes, a real
// PostgreSQL server and (for the site) a real browser.
package e2e

import (
	"testing"

	"github.com/cairnhq/cairn/store/pgtest"
)

// TestMain starts a private PostgreSQL cluster for the test binary (or uses
// DATABASE_URL) so that each test can take its own database with pgtest.New.
func TestMain(m *testing.M) { pgtest.Main(m) }
