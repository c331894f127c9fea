package lease_test

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/lease"
)

// Ranks in these tests: 0 speculative, 1 batch, 2 interactive (a higher
// rank is served first, as in package admission).
func TestDivide(t *testing.T) {
	for _, tc := range []struct {
		name   string
		total  int
		demand [][]int
		want   []int
	}{
		{"nobody", 16, nil, []int{}},
		{"alone, idle: every slot", 16, [][]int{{0, 0, 0}}, []int{16}},
		{"alone, busy", 16, [][]int{{100, 0, 0}}, []int{16}},
		{"three idle: spread evenly, the remainder by order", 16, [][]int{{}, {}, {}}, []int{6, 5, 5}},
		{"ranks first: interactive on B before speculative on A", 16,
			[][]int{{100, 0, 0}, {0, 0, 10}}, []int{6, 10}},
		{"interactive demand beyond the slots takes them all but A's floor", 16,
			[][]int{{100, 0, 0}, {0, 0, 40}}, []int{1, 15}},
		{"max-min within a rank", 16,
			[][]int{{0, 0, 2}, {0, 0, 30}, {0, 0, 30}}, []int{2, 7, 7}},
		{"max-min, the remainder in order", 16,
			[][]int{{0, 0, 30}, {0, 0, 30}, {0, 0, 30}}, []int{6, 5, 5}},
		{"a rank below gets what the one above leaves", 16,
			[][]int{{0, 20, 4}, {50, 0, 4}}, []int{12, 4}},
		{"idle slots spread so a quiet replica has some", 16,
			[][]int{{0, 0, 4}, {0, 0, 0}, {0, 0, 0}}, []int{8, 4, 4}},
		{"more replicas than slots: one each all the same", 2,
			[][]int{{5}, {5}, {5}}, []int{1, 1, 1}},
		{"ranks of different lengths", 10, [][]int{{3}, {0, 0, 0, 9}}, []int{1, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lease.Divide(tc.total, tc.demand)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Divide(%d, %v) = %v, want %v", tc.total, tc.demand, got, tc.want)
			}
			sum := 0
			for _, g := range got {
				sum += g
			}
			if len(got) > 0 && sum != max(tc.total, len(got)) {
				t.Fatalf("the division hands out %d slots, want %d", sum, max(tc.total, len(got)))
			}
		})
	}
}
