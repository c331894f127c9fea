package lease

import "slices"

// Divide splits total slots among replicas by their demand by rank
// (demand[i][r]: replica i's calls in flight or queued at rank r; a higher
// rank is served first, as in package admission). It returns each
// replica's target, in the order given.
//
//   - Every replica gets one slot first — a floor, so that a replica whose
//     demand is new is not starved until the next renewal — and that slot
//     serves its most urgent unit of demand. With more replicas than slots
//     each still gets one: a gate cannot have none.
//   - Then rank by rank, highest first, what is left is shared max-min
//     (water-filling) among the replicas' demands at that rank: interactive
//     work waiting on one replica is served before speculative work on
//     another, and within a rank no replica gets more than another that
//     wants more.
//   - What demand leaves idle is spread evenly, so that a replica whose
//     traffic arrives between two renewals has slots to serve it with.
//
// Leftover single slots go to the replicas in the order given: Table
// orders them by ID, so every replica computes the same division.
func Divide(total int, demand [][]int) []int {
	n := len(demand)
	alloc := make([]int, n)
	if n == 0 {
		return alloc
	}
	ranks := 0
	d := make([][]int, n)
	for i, row := range demand {
		d[i] = slices.Clone(row)
		ranks = max(ranks, len(row))
		alloc[i] = 1
		for r := len(d[i]) - 1; r >= 0; r-- { // the floor serves the most urgent unit
			if d[i][r] > 0 {
				d[i][r]--
				break
			}
		}
	}
	rest := max(total-n, 0)
	want := make([]int, n)
	for r := ranks - 1; r >= 0 && rest > 0; r-- {
		for i := range d {
			want[i] = 0
			if r < len(d[i]) {
				want[i] = max(d[i][r], 0)
			}
		}
		for i, g := range waterFill(want, rest) {
			alloc[i] += g
			rest -= g
		}
	}
	if rest > 0 {
		for i := range alloc {
			alloc[i] += rest / n
			if i < rest%n {
				alloc[i]++
			}
		}
	}
	return alloc
}

// waterFill shares budget among wants max-min: each gets its want if that
// is no more than an equal share of what the smaller wants left, the
// others an equal share, the remainder one each in index order.
func waterFill(want []int, budget int) []int {
	got := make([]int, len(want))
	sum := 0
	var order []int
	for i, w := range want {
		sum += w
		if w > 0 {
			order = append(order, i)
		}
	}
	if sum <= budget {
		copy(got, want)
		return got
	}
	slices.SortFunc(order, func(a, b int) int {
		if want[a] != want[b] {
			return want[a] - want[b]
		}
		return a - b
	})
	k := len(order)
	j := 0
	for ; j < len(order); j++ {
		i := order[j]
		if want[i]*k > budget {
			break
		}
		got[i] = want[i]
		budget -= want[i]
		k--
	}
	rest := order[j:]
	slices.Sort(rest) // the remainder goes in index order
	for x, i := range rest {
		got[i] = budget / k
		if x < budget%k {
			got[i]++
		}
	}
	return got
}
