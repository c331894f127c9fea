package batchapi

import "testing"

// TestUploadsBound: a tenant past batch.max_tenant_uploads, or anyone past
// batch.max_uploads, is refused naming the bound; a release gives the turn
// back, once however often it is called.
func TestUploadsBound(t *testing.T) {
	u := newUploads(2, 1)
	releaseA, _, _, ok := u.acquire("a")
	if !ok {
		t.Fatal("a's first upload refused")
	}
	if _, field, bound, ok := u.acquire("a"); ok || field != "batch.max_tenant_uploads" || bound != 1 {
		t.Errorf("a's second: %v %s %d, want refused by batch.max_tenant_uploads (1)", ok, field, bound)
	}
	releaseB, _, _, ok := u.acquire("b")
	if !ok {
		t.Fatal("b's first upload refused")
	}
	if _, field, bound, ok := u.acquire("c"); ok || field != "batch.max_uploads" || bound != 2 {
		t.Errorf("c's first: %v %s %d, want refused by batch.max_uploads (2)", ok, field, bound)
	}
	releaseA()
	releaseA() // a second call gives back nothing more
	if _, _, _, ok := u.acquire("c"); !ok {
		t.Error("c refused after a's upload ended")
	}
	if _, _, _, ok := u.acquire("d"); ok {
		t.Error("d admitted: a's double release gave back two turns")
	}
	releaseB()
	if n := len(u.mu.byTenant); n != 1 {
		t.Errorf("%d tenants counted, want 1 (c)", n)
	}
}
