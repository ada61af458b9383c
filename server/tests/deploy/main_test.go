package deploy

import (
	"testing"

	"github.com/progressdb/progressdb/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }
