package spend_test

import (
	"testing"

	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/spend/spendtest"
)

func TestMemoryLedger(t *testing.T) {
	spendtest.Run(t, func(*testing.T) spend.Ledger { return spend.NewMemoryLedger() })
}
