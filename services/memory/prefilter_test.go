package memory

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// labelled is one user message of an extraction set: durable when it states a lasting fact about
// the user (it must reach the extraction model), else a task, question or small talk.
type labelled struct {
	text, lang, kind string
	durable          bool
}

func prefilterSays(text string) (bool, string) {
	return worthExtracting(material{user: []string{text}}, false)
}

func heldOut(t *testing.T) []labelled {
	t.Helper()
	f, err := os.Open("testdata/prefilter_heldout.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []labelled
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 || (f[0] != "D" && f[0] != "T") {
			t.Fatalf("bad line %q", line)
		}
		out = append(out, labelled{text: f[2], lang: f[1], kind: "held-out", durable: f[0] == "D"})
	}
	return out
}

// TestPrefilterHeldOut: phrasings written before the pre-filter's rules and words, never used to
// tune them: every durable one reaches extraction.
func TestPrefilterHeldOut(t *testing.T) {
	set := heldOut(t)
	skipped, tasks := 0, 0
	for _, c := range set {
		ok, why := prefilterSays(c.text)
		switch {
		case c.durable && !ok:
			t.Errorf("durable %s %q skipped (%s)", c.lang, c.text, why)
		case !c.durable:
			tasks++
			if !ok {
				skipped++
			} else {
				t.Logf("task %s %q extracted (%s)", c.lang, c.text, why)
			}
		}
	}
	t.Logf("held out: %d durable, all reach extraction; %d of %d tasks skipped (%.0f%%)", len(set)-tasks, skipped, tasks, 100*float64(skipped)/float64(tasks))
}
