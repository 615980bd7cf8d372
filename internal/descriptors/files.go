package descriptors

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/rules"
)

// This file reads the listed files and directories and puts their domains
// together; load.go parses one file.

// Listed reports whether Load reads the file named name in a listed
// directory: a YAML file (*.yaml, *.yml) that is not hidden.
func Listed(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// Load reads the descriptor files named by paths: each a file, or a
// directory whose YAML files (*.yaml, *.yml; not hidden ones, such as the
// ..data links of a Kubernetes ConfigMap volume) are all read, in name
// order; a listed directory with none is an error. Every problem of every
// file is reported in one rules.ParseErrors, each naming its file and
// line; on any problem Load returns no Set. A domain may appear in one
// file only, and a file is read once: one named twice (listed twice, or
// beside its directory, or by two links) is an error. The entries of a listed directory that are not read, but for
// hidden ones, are named by the Set's Skipped.
func Load(paths []string) (*Set, error) { return LoadWith(paths, LoadOptions{}) }

// LoadOptions are the options of LoadWith.
type LoadOptions struct {
	// MergeDomains lets a domain appear in several files, as the reference
	// service's MERGE_DOMAIN_CONFIG: each file's top-level descriptors are
	// added to the domain, in file order, a key and value given twice at
	// the top level being an error (the reference merges the top level
	// only).
	MergeDomains bool
}

// LoadWith is Load with options.
func LoadWith(paths []string, o LoadOptions) (*Set, error) {
	var files, notRead []string
	var errs rules.ParseErrors
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			errs = append(errs, &rules.ParseError{File: p, Msg: fileErr(err)})
			continue
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, &rules.ParseError{File: p, Msg: fileErr(err)})
			continue
		}
		read, dirs, others := 0, 0, 0
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") {
				continue
			}
			full := filepath.Join(p, n)
			fi, err := os.Stat(full)
			switch {
			case err != nil:
				continue // a dangling link
			case fi.IsDir():
				dirs++
				notRead = append(notRead, full)
				continue
			case !Listed(n):
				others++
				notRead = append(notRead, full)
				continue
			}
			files = append(files, full)
			read++
		}
		if read == 0 {
			// Not a config without limits: the reference service reads
			// every file of its directory, subdirectories included, so a
			// directory it served may hold none that is read here.
			errs = append(errs, &rules.ParseError{File: p, Msg: "no descriptor file: only the *.yaml and *.yml files directly in a listed directory are read" + skipped(dirs, others)})
		}
	}
	a := newAssembler(o)
	a.s.skipped = notRead
	a.errs = errs
	var read []fileRead // each file read, to refuse one read twice
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			if prev := sameFile(read, fi); prev == f {
				a.errs = append(a.errs, &rules.ParseError{File: f, Msg: "read twice: grpc.config lists it twice, or beside its directory: list each file once"})
				continue
			} else if prev != "" {
				a.errs = append(a.errs, &rules.ParseError{File: f, Msg: "the same file as " + prev + ", read already: list each file once"})
				continue
			}
			read = append(read, fileRead{f, fi})
		}
		data, err := readFile(f)
		if err != nil {
			a.errs = append(a.errs, &rules.ParseError{File: f, Msg: err.Error()})
			continue
		}
		a.add(f, data)
	}
	return a.finish()
}

// Doc is one domain's descriptor config held in memory, in the file
// format: Name names it in problems, as a file's path does.
type Doc struct {
	Name string
	Data []byte
}

// FromDocs is LoadWith for configs made by a program (such as those an
// xDS server sends, turned into the file format): each doc is parsed as a
// file is, with the same rules and the same problems, and the docs are
// put together as files are, in order. On any problem it returns no Set,
// and every problem, each naming its doc and key but no line (the lines
// are the program's, not the author's).
func FromDocs(docs []Doc, o LoadOptions) (*Set, error) {
	a := newAssembler(o)
	for _, d := range docs {
		if len(d.Data) > MaxFileSize {
			a.errs = append(a.errs, &rules.ParseError{File: d.Name, Msg: fmt.Sprintf("larger than %d bytes", MaxFileSize)})
			continue
		}
		a.add(d.Name, d.Data)
	}
	for _, e := range a.errs {
		e.Line = 0
	}
	return a.finish()
}

// assembler puts parsed descriptor files together into a Set.
type assembler struct {
	o     LoadOptions
	s     *Set
	where map[string]string // domain → the file it was first read from
	h     hash.Hash
	errs  rules.ParseErrors
	// merged are the domains read from more than one file, in the order
	// of their first merge.
	merged []string
}

func newAssembler(o LoadOptions) *assembler {
	return &assembler{o: o, s: &Set{domains: map[string]*node{}}, where: map[string]string{}, h: sha256.New()}
}

// add parses the file f's content data and adds its domain.
func (a *assembler) add(f string, data []byte) {
	s := a.s
	fmt.Fprintf(a.h, "%d:%s%d:", len(f), f, len(data))
	a.h.Write(data)
	d, err := parseFile(f, data)
	if err != nil {
		var pe rules.ParseErrors
		if errors.As(err, &pe) {
			a.errs = append(a.errs, pe...)
		} else {
			a.errs = append(a.errs, &rules.ParseError{File: f, Msg: err.Error()})
		}
		return
	}
	if prev, ok := a.where[d.domain]; ok {
		if !a.o.MergeDomains {
			a.errs = append(a.errs, &rules.ParseError{File: f, Line: d.line, Key: "domain",
				Msg: fmt.Sprintf("domain %q is already configured in %s: a domain lives in one file (unless grpc.merge_domains)", d.domain, prev)})
			return
		}
		if es := merge(s.domains[d.domain], d.root, f, fmt.Sprintf("domain %q merged from %s", d.domain, prev)); len(es) > 0 {
			a.errs = append(a.errs, es...)
			return
		}
		if !slices.Contains(a.merged, d.domain) {
			a.merged = append(a.merged, d.domain)
		}
		s.rules += d.rules
		s.files = append(s.files, f)
		return
	}
	a.where[d.domain] = f
	s.domains[d.domain] = d.root
	s.order = append(s.order, d.domain)
	s.rules += d.rules
	s.files = append(s.files, f)
}

// finish returns the Set, or every problem (in file order, each file's by
// line).
func (a *assembler) finish() (*Set, error) {
	if len(a.errs) > 0 {
		return nil, a.errs
	}
	// Each file was checked alone (parseFile): a ring now runs through
	// the files of a merged domain.
	for _, d := range a.merged {
		if e := replacesRing(a.s.domains[d]); e != nil {
			a.errs = append(a.errs, e)
		}
	}
	if len(a.errs) > 0 {
		return nil, a.errs
	}
	a.h.Sum(a.s.digest[:0])
	return a.s, nil
}

// fileRead is a descriptor file read, by the name it was read by.
type fileRead struct {
	name string
	fi   os.FileInfo
}

// sameFile returns the name by which the file fi was read, or "".
func sameFile(read []fileRead, fi os.FileInfo) string {
	for _, r := range read {
		if os.SameFile(r.fi, fi) {
			return r.name
		}
	}
	return ""
}

// skipped describes the entries of a directory that were not read, or "".
func skipped(dirs, others int) string {
	var parts []string
	plural := func(n int, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	if dirs > 0 {
		parts = append(parts, plural(dirs, "subdirectory", "subdirectories"))
	}
	if others > 0 {
		parts = append(parts, plural(others, "other file", "other files"))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (skipped: " + strings.Join(parts, ", ") + ")"
}

func fileErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, errors.New(fileErr(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, errors.New(fileErr(err))
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("file larger than %d bytes", MaxFileSize)
	}
	return data, nil
}

// merge adds the top-level descriptors of src, read from file, to dst,
// the same domain's; a key and value dst has already is an error (the
// reference service merges the top level only), and nothing is added.
func merge(dst, src *node, file, from string) rules.ParseErrors {
	var es rules.ParseErrors
	for _, n := range src.order {
		if _, dup := dst.children[kv{n.key, n.value}]; dup {
			full := n.key
			if n.value != "" {
				full += "_" + n.value
			}
			es = append(es, &rules.ParseError{File: file, Line: n.line, Key: n.at,
				Msg: fmt.Sprintf("duplicate descriptor %q: the same key and value twice at one level (%s)", full, from)})
		}
	}
	if len(es) > 0 {
		return es
	}
	wild := append(slices.Clip(dst.wild), src.wild...)
	wix, crowd := indexWild(wild)
	if crowd != nil {
		n := wild[crowd.j].n // from src: dst's own are within the bound
		return rules.ParseErrors{{File: file, Line: n.line, Key: n.at,
			Msg: crowd.msg(wild, fmt.Sprintf("the top level (%s)", from))}}
	}
	for _, n := range src.order {
		dst.children[kv{n.key, n.value}] = n
		dst.order = append(dst.order, n)
	}
	dst.wild, dst.wix = wild, wix
	return nil
}
