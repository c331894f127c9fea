package gateway

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/chain"
)

// fingerprintSeed keys the body fingerprints of this process. maphash
// rather than FNV or a cryptographic hash: it runs at memory speed on
// bodies of hundreds of kilobytes (hardware AES where there is some), and
// with a seed no caller knows, nobody can craft a body that collides with
// another tenant's to have that tenant's call charged as a retry. A
// fingerprint need not outlive the process: the requests it compares are
// remembered in this process's memory only.
var fingerprintSeed = maphash.MakeSeed()

// fingerprint identifies what a billed call asks, for the chain's
// recognition of retries sent without a header (chain.RecogniseConfig):
// the path and the body's bytes. The bytes as sent, not the JSON they
// decode to: an SDK or a script that retries sends the same bytes, and
// equal bytes are cheap to be sure of. Zero (no comparison) for a call
// that is not billed or has no body.
func fingerprint(path string, billed bool, body []byte) uint64 {
	if !billed || len(body) == 0 {
		return 0
	}
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	h.WriteString(path)
	h.WriteByte(0)
	h.Write(body)
	return max(h.Sum64(), 1)
}

// How a retry was recognised: the label values of
// sluice_retries_recognised_total.
const (
	retryByHeader      = "header"      // X-Sluice-Attempt ≥ 1
	retryByStainless   = "stainless"   // X-Stainless-Retry-Count ≥ 1 (the official SDKs)
	retryByFingerprint = "fingerprint" // the chain's recognise stage
)

// recognisedRetries is sluice_retries_recognised_total: the retries the
// gateway saw, by how it knew. Those a header declared are counted as
// they arrive; those the chain recognised are its own count, read at
// scrape time, refusals included.
type recognisedRetries struct {
	chain     *chain.Chain
	header    atomic.Uint64
	stainless atomic.Uint64
}

var descRecognised = prometheus.NewDesc("sluice_retries_recognised_total",
	"Retries seen, by how they were recognised: header (X-Sluice-Attempt ≥ 1), stainless (X-Stainless-Retry-Count ≥ 1), fingerprint (no header: a copy of a request whose last copy failed).",
	[]string{"how"}, nil)

// declared counts a retry its caller declared with a header.
func (r *recognisedRetries) declared(by string) {
	switch by {
	case retryByHeader:
		r.header.Add(1)
	case retryByStainless:
		r.stainless.Add(1)
	}
}

func (r *recognisedRetries) Describe(ch chan<- *prometheus.Desc) { ch <- descRecognised }

func (r *recognisedRetries) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descRecognised, prometheus.CounterValue, float64(r.header.Load()), retryByHeader)
	ch <- prometheus.MustNewConstMetric(descRecognised, prometheus.CounterValue, float64(r.stainless.Load()), retryByStainless)
	ch <- prometheus.MustNewConstMetric(descRecognised, prometheus.CounterValue, float64(r.chain.RetriesRecognised()), retryByFingerprint)
}
