package boardview_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/coldstart-go/coldstart/gate/boardview"
)

func serveLivez(h http.Handler, target string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
	return rec.Code, rec.Body.String()
}

// TestLiveHandlerFailsOnlyOnAFailedCheck: every check passing answers 200
// "ok"; one stuck component answers 500 naming it, on its own line however
// its error is written.
func TestLiveHandlerFailsOnlyOnAFailedCheck(t *testing.T) {
	var stuck error
	h := boardview.LiveHandler(map[string]func() error{
		"lease":    func() error { return stuck },
		"listener": func() error { return nil },
	})
	code, body := serveLivez(h, "/livez")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok", body)
	code, body = serveLivez(h, "/livez?verbose")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "[+]lease ok\n[+]listener ok\nlivez check passed\n", body)

	stuck = errors.New("renewer stuck for 12s\n[+]forged ok")
	code, body = serveLivez(h, "/livez")
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Equal(t, "[-]lease failed: renewer stuck for 12s␊[+]forged ok\n[+]listener ok\nlivez check failed\n", body)
}
