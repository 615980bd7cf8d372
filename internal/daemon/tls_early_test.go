package daemon

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

// TestCertNotYetValidHeld: a renewed certificate whose validity starts in
// an hour (issued ahead, or by a CA whose clock runs ahead) is not served,
// since clients would refuse it: every listener keeps the one in force,
// and the log says why, naming the file and when the new one starts. A
// reload (SIGHUP) meanwhile is applied, not refused over it, and keeps it
// too. (From its NotBefore on it is served: tlsconf's tests, on a clock of
// their own.)
func TestCertNotYetValidHeld(t *testing.T) {
	rd, ca, certFile, keyFile, first := startRotatedFiles(t)
	rd.waitServed(t, "the first certificate served", first)
	nb := time.Now().Add(time.Hour).Truncate(time.Second)
	early := ca.ServerWith(t, "early", func(c *x509.Certificate) { c.NotBefore, c.NotAfter = nb, nb.Add(24*time.Hour) })
	held := func() int { return strings.Count(rd.logs.String(), "the new certificate is not valid yet") }
	replace(t, keyFile, read(t, early.KeyFile))
	replace(t, certFile, read(t, early.CertFile))
	waitFor(t, "the early certificate logged by the three listeners", func() bool { return held() >= 3 })
	logs := rd.logs.String()
	line := logs[strings.LastIndex(logs, "the new certificate is not valid yet"):]
	line = line[:strings.IndexByte(line, '\n')]
	if !strings.Contains(line, certFile) || !strings.Contains(line, nb.UTC().Format(time.RFC3339)) {
		t.Errorf("the early certificate's log line %q does not name %s and %s", line, certFile, nb.UTC().Format(time.RFC3339))
	}
	want := first.TLS.Leaf.SerialNumber.String()
	if got := rd.served(t); got != [3]string{want, want, want} {
		t.Errorf("with a certificate valid only in an hour, the listeners serve %v, want the one in force (%s)", got, want)
	}
	before := held()
	if err := rd.d.Reload(); err != nil {
		t.Errorf("Reload with a certificate valid only in an hour: %v, want applied", err)
	}
	if got := rd.served(t); got != [3]string{want, want, want} {
		t.Errorf("after a reload, the listeners serve %v, want the one in force (%s)", got, want)
	}
	if held() < before+3 {
		t.Errorf("the reload did not log the early certificate again for each listener")
	}
}

// TestCertExpiredKept: a certificate written over the one in force that
// has already expired (a backup restored, a renewal agent's stale copy)
// is not served, since every client would refuse it: each listener keeps
// the one in force, and the log says why, naming the file and when the
// new one expired. A reload meanwhile is applied and keeps it too.
func TestCertExpiredKept(t *testing.T) {
	rd, ca, certFile, keyFile, first := startRotatedFiles(t)
	rd.waitServed(t, "the first certificate served", first)
	na := time.Now().Add(-time.Hour).Truncate(time.Second)
	stale := ca.ServerWith(t, "stale", func(c *x509.Certificate) { c.NotBefore, c.NotAfter = na.Add(-24*time.Hour), na })
	kept := func() int { return strings.Count(rd.logs.String(), "the new certificate has expired") }
	replace(t, keyFile, read(t, stale.KeyFile))
	replace(t, certFile, read(t, stale.CertFile))
	waitFor(t, "the expired certificate logged by the three listeners", func() bool { return kept() >= 3 })
	logs := rd.logs.String()
	line := logs[strings.LastIndex(logs, "the new certificate has expired"):]
	line = line[:strings.IndexByte(line, '\n')]
	if !strings.Contains(line, certFile) || !strings.Contains(line, na.UTC().Format(time.RFC3339)) {
		t.Errorf("the expired certificate's log line %q does not name %s and %s", line, certFile, na.UTC().Format(time.RFC3339))
	}
	want := first.TLS.Leaf.SerialNumber.String()
	if got := rd.served(t); got != [3]string{want, want, want} {
		t.Errorf("with an expired certificate in the files, the listeners serve %v, want the one in force (%s)", got, want)
	}
	before := kept()
	if err := rd.d.Reload(); err != nil {
		t.Errorf("Reload with an expired certificate in the files: %v, want applied", err)
	}
	if got := rd.served(t); got != [3]string{want, want, want} {
		t.Errorf("after a reload, the listeners serve %v, want the one in force (%s)", got, want)
	}
	if kept() < before+3 {
		t.Errorf("the reload did not log the expired certificate again for each listener")
	}
}
