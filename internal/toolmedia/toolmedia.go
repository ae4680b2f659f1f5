// Package toolmedia holds the one text form of a tool result's non-text block (an image, an
// audio clip, a resource), shared by the tool service, which writes it into the output a model
// reads, and Hermes' MCP endpoint, which passes the block itself on and so leaves the text out.
package toolmedia

import (
	"fmt"
	"strings"
)

// Describe is the text that stands for a non-text block in a tool's output, for models that read
// only text: "[image image/png 4033 bytes]", with the reason when its bytes were not passed on,
// and an embedded resource's text or a link's name after it.
func Describe(typ, mimeType, uri, text string, size int64, omitted string) string {
	d := []string{typ}
	if mimeType != "" {
		d = append(d, mimeType)
	}
	if uri != "" {
		d = append(d, uri)
	}
	if size > 0 {
		d = append(d, fmt.Sprintf("%d bytes", size))
	}
	line := "[" + strings.Join(d, " ")
	if omitted != "" {
		line += "; not passed on: " + omitted
	}
	line += "]"
	if text != "" {
		line += " " + text
	}
	return line
}
