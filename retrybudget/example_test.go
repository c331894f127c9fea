package retrybudget_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/retrybudget"
)

func Example() {
	b, err := retrybudget.New(retrybudget.Config{}) // 10% of first attempts, 10/s floor
	if err != nil {
		panic(err)
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

	// Twenty first attempts in the same instant earn two retries.
	for range 20 {
		b.Deposit(start)
	}
	fmt.Println(b.TryWithdraw(start), b.TryWithdraw(start), b.TryWithdraw(start))

	// The third retry must wait for the floor.
	wait := b.RetryAfter(start)
	fmt.Println(wait, b.TryWithdraw(start.Add(wait)))
	fmt.Printf("%+v\n", b.Stats())
	// Output:
	// true true false
	// 100ms true
	// {Deposits:20 Withdrawals:3 Refusals:1}
}
