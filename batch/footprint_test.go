package batch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkBoltFootprint measures what a file costs on disk in the bbolt
// store: 10,000 files of 153 bytes (the hostile battery's loop of uploads)
// and four of 25 MB, each staged and committed as an upload is, into a new
// store; then every file deleted and the same stored again, which reuses
// the freed pages rather than grow the file. It reports the store's size
// per byte of content and per file. The commits skip their fsync
// (NoSync), which changes the time taken, not the layout.
//
//	go test -run '^$' -bench BoltFootprint -benchtime 1x ./batch/
func BenchmarkBoltFootprint(b *testing.B) {
	for _, tc := range []struct {
		name    string
		n, size int
	}{{"10000x153B", 10000, 153}, {"4x25MB", 4, 25_000_000}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				path := filepath.Join(b.TempDir(), "batch.db")
				s, err := OpenBolt(path, time.Second)
				if err != nil {
					b.Fatal(err)
				}
				s.db.NoSync = true
				empty := fileSize(b, path)
				content := bytes.Repeat([]byte("x"), tc.size)
				store := func(round int) {
					for i := range tc.n {
						f := File{ID: fmt.Sprintf("file-%d-%d", round, i), Tenant: "t", Purpose: "batch", CreatedAt: time.Now()}
						if err := PutFile(context.Background(), s, f, content); err != nil {
							b.Fatal(err)
						}
					}
				}
				store(0)
				first := fileSize(b, path)
				for i := range tc.n {
					if err := s.DeleteFile(context.Background(), "t", fmt.Sprintf("file-0-%d", i)); err != nil {
						b.Fatal(err)
					}
				}
				store(1)
				again := fileSize(b, path)
				s.Close()
				stored := float64(tc.n * tc.size)
				b.ReportMetric(float64(first)/stored, "disk-bytes/byte")
				b.ReportMetric(float64(first-empty)/float64(tc.n), "disk-bytes/file")
				b.ReportMetric(float64(again)/float64(first), "size-after-delete-and-again/size")
			}
		})
	}
}

func fileSize(b *testing.B, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}
