package spend

import (
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/contract"
)

// Amounts of money are kept as whole nano-dollars (1e-9 USD) in int64: sums
// are exact whatever the order of additions (so a reservation released is
// exactly what was reserved, and the books balance to the last unit), a
// shared store can add them atomically as integers, and the range (±9.2e9
// USD) is more than any budget. One token at $0.01 per million tokens is 10
// nano-dollars, so rounding each cost to a nano-dollar loses nothing that
// matters.
const nanoPerUSD = 1e9

func toUSD(nano int64) float64 { return float64(nano) / nanoPerUSD }

// fromUSD converts dollars to nano-dollars, rounding to the nearest.
func fromUSD(usd float64) int64 { return int64(math.Round(usd * nanoPerUSD)) }

// price is a Price with the cached rate resolved, in USD per million tokens.
type price struct{ in, cached, out float64 }

func newPrice(p Price) price {
	cached := p.InputPerMTok
	if p.CachedInputPerMTok != nil {
		cached = *p.CachedInputPerMTok
	}
	return price{in: p.InputPerMTok, cached: cached, out: p.OutputPerMTok}
}

// tokens converts n tokens at perMTok USD per million to nano-dollars:
// n × perMTok / 1e6 USD = n × perMTok × 1e3 nano-dollars.
func tokens(n int64, perMTok float64) float64 { return float64(n) * perMTok * 1e3 }

// cost is the nano-dollar cost of u. u must be valid.
func (p price) cost(u contract.Usage) int64 {
	return int64(math.Round(tokens(u.Input-u.CachedInput, p.in) + tokens(u.CachedInput, p.cached) + tokens(u.Output, p.out)))
}

// estimate is the nano-dollar cost of in input tokens (all billed as
// uncached: the cache hit is not known in advance, and a reservation should
// err high) and out output tokens.
func (p price) estimate(in, out int64) int64 {
	return int64(math.Round(tokens(in, p.in) + tokens(out, p.out)))
}

// ErrInvalidUsage is matched (errors.Is) by the error Reconcile returns for
// a usage that cannot be true.
var ErrInvalidUsage = errors.New("spend: invalid usage")

// validUsage reports a usage that cannot be true, naming the field.
func validUsage(u contract.Usage) error {
	switch {
	case u.Input < 0:
		return fmt.Errorf("%w: Usage.Input = %d, want ≥ 0", ErrInvalidUsage, u.Input)
	case u.CachedInput < 0:
		return fmt.Errorf("%w: Usage.CachedInput = %d, want ≥ 0", ErrInvalidUsage, u.CachedInput)
	case u.Output < 0:
		return fmt.Errorf("%w: Usage.Output = %d, want ≥ 0", ErrInvalidUsage, u.Output)
	case u.CachedInput > u.Input:
		return fmt.Errorf("%w: Usage.CachedInput = %d is more than Usage.Input = %d (Input counts cached tokens too)", ErrInvalidUsage, u.CachedInput, u.Input)
	}
	return nil
}

// Cost returns the cost in USD of usage u of model, at the configured
// price (or the default price, when unknown models are billed at it). It
// lets a caller value usage outside a reservation, e.g. the wasted part of
// an answer nobody received.
func (l *Limiter) Cost(model string, u contract.Usage) (float64, error) {
	p, err := l.cfg().priceOf(model)
	if err != nil {
		return 0, err
	}
	if err := validUsage(u); err != nil {
		return 0, err
	}
	return toUSD(p.cost(u)), nil
}
