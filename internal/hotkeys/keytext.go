package hotkeys

import (
	"slices"
	"unicode/utf8"
)

// appendKey appends the text key is kept and reported as: the key itself
// when it is valid UTF-8 of at most maxKey bytes; else as much of it as
// fits in maxKey bytes, cut between characters, each byte that is not
// UTF-8 written as U+FFFD, then "…" and 16 hex digits of a digest of the
// whole key (FNV-1a, 64 bits: the same on every instance), so that two
// keys alike in their first maxKey bytes are two texts. The text is
// always a valid Prometheus label value.
func appendKey(dst []byte, key string, maxKey int) []byte {
	if len(key) <= maxKey && utf8.ValidString(key) {
		return append(dst, key...)
	}
	// Room for the whole text at once: appending character by character
	// would double the buffer past it (512 bytes for 275).
	dst = slices.Grow(dst, maxKey+keyText)
	kept := 0
	for _, r := range key { // r is utf8.RuneError for a byte that is not UTF-8
		w := utf8.RuneLen(r)
		if kept+w > maxKey {
			break
		}
		dst = utf8.AppendRune(dst, r)
		kept += w
	}
	dst = append(dst, "…"...)
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	for sh := 60; sh >= 0; sh -= 4 {
		dst = append(dst, "0123456789abcdef"[h>>sh&15])
	}
	return dst
}

// keyText is the most bytes appendKey appends beyond maxKey: "…" (3) and
// 16 hex digits.
const keyText = 3 + 16

// appendKept appends what an entry keeps of key: the key itself, whatever
// its bytes, when it has at most maxKey of them (so that shards: auto can
// rebuild it), else its text (appendKey), which is longer than maxKey;
// either way at most maxKey+keyText bytes. bin reports a key kept as it is
// that is not UTF-8: its text is then appendKey's, not the key.
func appendKept(dst []byte, key string, maxKey int) (kept []byte, bin bool) {
	if len(key) > maxKey {
		return appendKey(dst, key, maxKey), false
	}
	return append(dst, key...), !utf8.ValidString(key)
}
