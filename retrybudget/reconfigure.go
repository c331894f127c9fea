package retrybudget

import (
	"math"
	"time"
)

// Reconfigure changes the budget's ratio, floor and cap at now without
// resetting its balance: the floor's accrual up to now is credited at the
// old rate, and the balance carries over, cut to the new cap if that is
// lower. Its counters carry over too. An invalid cfg is refused with an
// error naming the field, and nothing changes.
func (b *Budget) Reconfigure(now time.Time, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	b.cfg = cfg
	b.perDeposit = int64(math.Round(cfg.Ratio * unit))
	b.perNano = cfg.MinPerSecond * unit / float64(time.Second)
	b.capUnits = int64(math.Round(cfg.MaxTokens * unit))
	if b.mu.tokens >= b.capUnits {
		b.mu.tokens, b.mu.frac = b.capUnits, 0
	}
	return nil
}
