// Package retrybudget caps how many retries a caller may send, as a fraction of
// the first attempts it sends.
//
// # Model
//
// A Budget is a token bucket fed by traffic rather than by a clock alone. Every
// first attempt deposits Ratio of a token; every retry must withdraw one whole
// token or is refused. With the default Ratio of 0.1, retries can never be more
// than about a tenth of the traffic, however many requests fail: under a full
// outage the retry load is bounded by construction instead of multiplying the
// offered load by the number of attempts each caller is willing to make.
//
// A caller that sends few requests would, by the ratio alone, almost never earn
// a retry. So tokens also accrue with time at MinPerSecond, a floor that lets a
// quiet caller retry now and then. The balance is capped at MaxTokens, which
// bounds the burst of retries that a long quiet period can bank.
//
// Time is an input: every method that reads the balance takes now, as
// golang.org/x/time/rate's AllowN(t, n) does. The package never reads the clock,
// sleeps or starts goroutines, so the same code runs in real time behind an HTTP
// client or gateway and in virtual time inside a simulator, and tests state
// their times explicitly.
//
// # Goals
//
//   - Bound retry amplification structurally, without relying on each caller's
//     backoff policy.
//   - Be cheap enough to sit on every request: a short critical section under a
//     mutex, no allocation.
//   - Keep exact books: the balance is kept in fixed point, so ten deposits of
//     0.1 are exactly one token (in float64 they are 0.9999999999999999 and the
//     retry they paid for would be refused).
//
// # Non-goals
//
//   - Deciding whether a request is worth retrying, or how long to wait before
//     retrying. That is the caller's policy (see package client); the budget only
//     answers "may one more retry go now?".
//   - Sharing a budget across processes. A budget is per process; a fleet of
//     callers each with its own budget still has its retries bounded by the
//     same ratio in aggregate.
//   - Fairness between callers sharing one Budget. Whoever asks first when a
//     token is available gets it.
package retrybudget
