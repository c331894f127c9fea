package mockllm_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sluicehq/sluice/mockllm"
)

// A mock provider mounted with httptest: one slot, no latency, the
// built-in price table.
func Example() {
	mock, err := mockllm.New(mockllm.Config{Slots: 1})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mock)
	defer srv.Close()
	defer mock.Close()

	resp, err := http.Post(srv.URL+mockllm.PathChatCompletions, "application/json", strings.NewReader(
		`{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"Four tokens of text."}]}`))
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	st := mock.Stats()
	fmt.Println(resp.Status)
	fmt.Printf("delivered %d, tokens %d in / %d out, cost $%.7f\n", st.Delivered, st.TokensIn, st.TokensOut, st.CostUSD)
	// Output:
	// 200 OK
	// delivered 1, tokens 5 in / 100 out, cost $0.0010125
}
