package mcpgateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// CleanOptions bound what cleaning leaves.
type CleanOptions struct {
	// MaxBytes caps the cleaned text, note included; 0 means no cap.
	MaxBytes int
	// CompactJSONOver compacts JSON text longer than this many bytes; negative never compacts.
	CompactJSONOver int
}

// Cleaned is text made fit for a model's context.
type Cleaned struct {
	// Text is the cleaned text, ending with a note when it was cut.
	Text string
	// Removed counts the characters removed or cut.
	Removed int64
	// Truncated says the text was cut to the cap.
	Truncated bool
	// Bytes is the size of the cleaned text before it was cut.
	Bytes int
}

// CleanText prepares text that comes from an MCP server (a resource, a prompt, a tool's output)
// before it can enter a model's context. Text from outside is an injection channel: invisible
// characters (zero-width, bidi controls, Unicode tag characters, variation-selector smuggling)
// can carry instructions a person reviewing the text never sees, so they are removed; HTML is
// reduced to its text; large JSON is compacted; and the size is capped with a note saying what
// was cut. mimeType may be empty; then HTML is recognised only by a leading <!doctype html> or
// <html>. The result depends only on the arguments.
func CleanText(text, mimeType string, opts CleanOptions) Cleaned {
	inRunes := int64(utf8.RuneCountInString(text))
	s := removeInvisible(text)
	if isHTML(mimeType, s) {
		s = removeInvisible(htmlToText(s))
	}
	if isJSONText(s) {
		if opts.CompactJSONOver >= 0 && len(s) > opts.CompactJSONOver {
			var b bytes.Buffer
			if json.Compact(&b, []byte(s)) == nil {
				s = b.String()
			}
		}
	} else {
		s = normalizeSpace(s)
	}
	out := Cleaned{Text: s, Bytes: len(s)}
	if opts.MaxBytes > 0 && len(s) > opts.MaxBytes {
		// The kept count has at most as many digits as the total, so this is the longest note.
		longest := truncationNote(len(s), len(s))
		keep := max(opts.MaxBytes-len(longest), 0)
		for keep > 0 && !utf8.RuneStart(s[keep]) {
			keep--
		}
		out.Text = s[:keep] + truncationNote(keep, len(s))
		out.Truncated = true
		s = s[:keep]
	}
	if removed := inRunes - int64(utf8.RuneCountInString(s)); removed > 0 {
		out.Removed = removed
	}
	return out
}

func truncationNote(kept, total int) string {
	return fmt.Sprintf("\n[truncated by Hermes: kept %d of %d bytes]", kept, total)
}

// invisible reports whether r is a character that renders as nothing (or as an unseen control)
// and so must not reach a model: controls other than tab and newline, format characters
// (zero-width spaces and joiners, bidi embeddings and isolates, the BOM, soft hyphens, Unicode
// tag characters U+E0000–E007F), the variation selectors supplement (used to smuggle bytes
// behind an emoji), the combining grapheme joiner, Hangul fillers, and noncharacters.
func invisible(r rune) bool {
	if r < 0xA0 { // ASCII and Latin-1 controls: the common case, without table lookups
		return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7F)
	}
	switch {
	case r == utf8.RuneError:
		return true
	case unicode.Is(unicode.Cc, r), unicode.Is(unicode.Cf, r):
		return true
	case r >= 0xE0000 && r <= 0xE0FFF: // tags and variation selectors supplement
		return true
	case r == 0x034F, r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0:
		return true
	case r >= 0xFDD0 && r <= 0xFDEF, r&0xFFFE == 0xFFFE:
		return true
	}
	return false
}

// removeInvisible drops invisible characters and invalid UTF-8, and turns CR, CRLF and the
// Unicode line and paragraph separators into "\n".
func removeInvisible(s string) string {
	clean := true
	for _, r := range s {
		if r == '\r' || r == 0x2028 || r == 0x2029 || invisible(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '\r':
			if i < len(s) && s[i] == '\n' {
				continue
			}
			b.WriteByte('\n')
		case r == 0x2028 || r == 0x2029:
			b.WriteByte('\n')
		case invisible(r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isHTML reports whether the text is an HTML document: by its MIME type, or, when none is
// given, by how it starts.
func isHTML(mimeType, s string) bool {
	if mimeType != "" {
		mt, _, err := mime.ParseMediaType(mimeType)
		return err == nil && (mt == "text/html" || mt == "application/xhtml+xml")
	}
	head := strings.TrimLeft(s, " \t\n")
	if len(head) > 15 {
		head = head[:15]
	}
	head = strings.ToLower(head)
	return strings.HasPrefix(head, "<!doctype html") || strings.HasPrefix(head, "<html")
}

// isJSONText reports whether s is a JSON object or array.
func isJSONText(s string) bool {
	t := strings.TrimLeft(s, " \t\n")
	return t != "" && (t[0] == '{' || t[0] == '[') && json.Valid([]byte(s))
}

// normalizeSpace removes trailing blanks on each line, collapses runs of blank lines to one, and
// trims blank lines at both ends; indentation is kept.
func normalizeSpace(s string) string {
	lines := strings.Split(s, "\n")
	out := lines[:0]
	blank := 0
	for _, l := range lines {
		l = strings.TrimRight(l, " \t")
		if l == "" {
			blank++
			continue
		}
		if blank > 0 && len(out) > 0 {
			out = append(out, "")
		}
		blank = 0
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// blockElements end a line of text.
var blockElements = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Br: true, atom.Hr: true, atom.Li: true, atom.Ul: true,
	atom.Ol: true, atom.Dl: true, atom.Dt: true, atom.Dd: true, atom.Tr: true, atom.Table: true,
	atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true,
	atom.Section: true, atom.Article: true, atom.Header: true, atom.Footer: true, atom.Nav: true,
	atom.Aside: true, atom.Main: true, atom.Blockquote: true, atom.Pre: true, atom.Form: true,
	atom.Title: true, atom.Figure: true, atom.Figcaption: true, atom.Address: true,
}

// hiddenElements hold no readable text.
var hiddenElements = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Svg: true, atom.Iframe: true, atom.Object: true, atom.Canvas: true,
}

// htmlToText reduces an HTML document to its readable text: scripts, styles and other hidden
// elements are dropped, block elements end lines, list items get "- ", entities are decoded,
// and whitespace outside <pre> is collapsed.
func htmlToText(s string) string {
	z := html.NewTokenizer(strings.NewReader(s))
	var w htmlWriter
	for {
		switch tt := z.Next(); tt {
		case html.ErrorToken:
			return tidyLines(w.b.String())
		case html.TextToken:
			w.text(string(z.Text()))
		case html.StartTagToken, html.SelfClosingTagToken:
			w.start(z, tt == html.StartTagToken)
		case html.EndTagToken:
			name, _ := z.TagName()
			w.end(atom.Lookup(name))
		}
	}
}

// htmlWriter is htmlToText's output and where it stands: inside how many hidden elements and
// how many <pre>.
type htmlWriter struct {
	b           strings.Builder
	hidden, pre int
}

// newline ends the current line, if one was started.
func (w *htmlWriter) newline() {
	if w.b.Len() > 0 && !strings.HasSuffix(w.b.String(), "\n") {
		w.b.WriteByte('\n')
	}
}

// text writes a text node, its whitespace collapsed outside <pre>.
func (w *htmlWriter) text(t string) {
	if w.hidden > 0 {
		return
	}
	if w.pre == 0 {
		t = strings.Join(strings.Fields(t), " ")
		if t == "" {
			return
		}
		if w.b.Len() > 0 && !strings.HasSuffix(w.b.String(), "\n") && !strings.HasSuffix(w.b.String(), " ") {
			w.b.WriteByte(' ')
		}
	}
	w.b.WriteString(t)
}

// start handles a start tag (open is false for a self-closing one).
func (w *htmlWriter) start(z *html.Tokenizer, open bool) {
	name, hasAttr := z.TagName()
	a := atom.Lookup(name)
	switch {
	case hiddenElements[a]:
		if open {
			w.hidden++
		}
	case a == atom.Img && w.hidden == 0:
		for hasAttr {
			var k, v []byte
			k, v, hasAttr = z.TagAttr()
			if string(k) == "alt" && len(v) > 0 {
				fmt.Fprintf(&w.b, " [image: %s] ", strings.Join(strings.Fields(string(v)), " "))
			}
		}
	case blockElements[a]:
		w.newline()
		if a == atom.Pre && open {
			w.pre++
		}
		if a == atom.Li {
			w.b.WriteString("- ")
		}
	}
}

// end handles an end tag.
func (w *htmlWriter) end(a atom.Atom) {
	switch {
	case hiddenElements[a]:
		if w.hidden > 0 {
			w.hidden--
		}
	case blockElements[a]:
		if a == atom.Pre && w.pre > 0 {
			w.pre--
		}
		w.newline()
	}
}

// tidyLines trims each line (HTML indentation carries no meaning) and drops blank runs.
func tidyLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return normalizeSpace(strings.Join(lines, "\n"))
}
