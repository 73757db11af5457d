package catalogue_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/internal/catalogue"
)

func TestReadFindsBothTables(t *testing.T) {
	c, err := catalogue.Read("testdata/README.md")
	require.NoError(t, err)
	assert.Equal(t, []catalogue.Record{{Component: "dialer", Message: "route chosen", Levels: []string{"INFO"}, Line: 5,
		Row: "| `dialer` | `route chosen`: prose after the message, with `code` | INFO | `route` (`local`\\|`peer`) |"}}, c.Records)
	require.Len(t, c.Families, 2)
	assert.Equal(t, catalogue.Family{Name: "coldstart_x_total", Type: "counter", Labels: []string{"a", "b"}, Line: 11,
		Row: "| `coldstart_x_total` | counter | `b`, `a` | the x's \\| y |"}, c.Families[0])
	assert.Equal(t, catalogue.Family{Name: "coldstart_y", Type: "gauge", Line: 12, Row: "| `coldstart_y` | gauge | — | y |"}, c.Families[1])
}

// A README the tests could misread is an error, not an empty catalogue.
func TestReadRefusesWhatItCannotRead(t *testing.T) {
	for name, text := range map[string]string{
		"no records table":    catalogue.FamiliesHeader + "\n",
		"two records tables":  catalogue.RecordsHeader + "\n\n" + catalogue.RecordsHeader + "\n\n" + catalogue.FamiliesHeader + "\n",
		"message not in code": catalogue.RecordsHeader + "\n| `gate` | gate opened | INFO | `gate` |\n\n" + catalogue.FamiliesHeader + "\n",
		"a cell missing":      catalogue.RecordsHeader + "\n| `gate` | `gate opened` | INFO |\n\n" + catalogue.FamiliesHeader + "\n",
		"no level":            catalogue.RecordsHeader + "\n| `gate` | `gate opened` | info | `gate` |\n\n" + catalogue.FamiliesHeader + "\n",
		"family not in code":  catalogue.RecordsHeader + "\n\n" + catalogue.FamiliesHeader + "\n| coldstart_y | gauge | — | y |\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "README.md")
			require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
			_, err := catalogue.Read(path)
			assert.Error(t, err)
		})
	}
}
