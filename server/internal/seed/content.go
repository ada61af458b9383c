package seed

import (
	"fmt"
	"strings"
)

// body is a message body as a chat client would send it.
type body struct {
	Text        string       `json:"text"`
	Attachments []attachment `json:"attachments,omitempty"`
}

type attachment struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Size int    `json:"size"`
}

// Vocabulary of the generated conversations. Read-only tables.
var (
	firstNames = []string{
		"ada", "alan", "amara", "ben", "carla", "chen", "dmitri", "elena", "farah", "gus",
		"hana", "ivan", "jonas", "kemi", "lars", "lucia", "mei", "nadia", "omar", "priya",
		"quinn", "rafael", "sara", "tomas", "uma", "victor", "wen", "yusuf", "zoe", "noor",
	}
	lastNames = []string{
		"adams", "bauer", "costa", "diaz", "evans", "fischer", "garcia", "haddad", "ito", "jensen",
		"kim", "lopez", "moreau", "nakamura", "okafor", "petrov", "rossi", "silva", "tanaka", "weber",
	}
	topics = []string{
		"Release 2.%d", "Q%d planning", "Incident #%d", "Sprint %d retro", "Design review %d",
		"Onboarding", "Customer feedback", "Hiring loop", "Team offsite", "Budget", "Roadmap",
		"On-call handover", "Database migration", "Pricing page", "Security audit", "Mobile app",
	}
	titleSuffixes = []string{"", "", " notes", " follow-up", " discussion", " checklist", " questions", " (draft)"}
	words         = []string{
		"the", "a", "we", "I", "you", "it", "this", "that", "should", "could", "will", "can",
		"deploy", "release", "review", "ship", "merge", "check", "fix", "test", "update", "move",
		"meeting", "tomorrow", "today", "later", "soon", "after", "before", "lunch", "standup",
		"branch", "build", "ticket", "customer", "dashboard", "metrics", "latency", "budget",
		"design", "draft", "doc", "slides", "plan", "issue", "bug", "feature", "rollout",
		"looks", "good", "great", "fine", "blocked", "done", "ready", "waiting", "on", "for",
		"with", "and", "but", "so", "maybe", "probably", "definitely", "thanks", "sure", "ok",
		"please", "again", "first", "next", "week", "friday", "monday", "numbers", "staging",
	}
	files = []attachment{
		{"screenshot.png", "image/png", 0}, {"IMG_%04d.jpg", "image/jpeg", 0},
		{"report-q%d.pdf", "application/pdf", 0}, {"notes.txt", "text/plain", 0},
		{"export-%d.csv", "text/csv", 0}, {"diagram.svg", "image/svg+xml", 0},
	}
)

func (g *generator) participants() []string {
	ps := make([]string, 2+g.rng.IntN(4))
	for i := range ps {
		ps[i] = firstNames[g.rng.IntN(len(firstNames))] + "." + lastNames[g.rng.IntN(len(lastNames))]
	}
	return ps
}

func (g *generator) title() string {
	topic := topics[g.rng.IntN(len(topics))]
	if strings.Contains(topic, "%d") {
		topic = fmt.Sprintf(topic, 1+g.rng.IntN(9))
	}
	return topic + titleSuffixes[g.rng.IntN(len(titleSuffixes))]
}

// body draws a message: mostly a short line, sometimes a paragraph or a
// long write-up, now and then with attachments.
func (g *generator) body() body {
	var sentences int
	switch r := g.rng.Float64(); {
	case r < 0.6:
		sentences = 1
	case r < 0.9:
		sentences = 2 + g.rng.IntN(3)
	default:
		sentences = 5 + g.rng.IntN(20)
	}
	b := body{Text: g.text(sentences)}
	if g.rng.Float64() < 0.1 {
		b.Attachments = make([]attachment, 1+g.rng.IntN(3))
		for i := range b.Attachments {
			a := files[g.rng.IntN(len(files))]
			if strings.Contains(a.Name, "%") {
				a.Name = fmt.Sprintf(a.Name, g.rng.IntN(10000))
			}
			a.Size = 1024 + g.rng.IntN(8<<20)
			b.Attachments[i] = a
		}
	}
	return b
}

// edit is a later version: a correction appended or the text rewritten.
func (g *generator) edit(b body) body {
	if g.rng.Float64() < 0.5 {
		b.Text += " Edit: " + g.text(1)
	} else {
		b.Text = g.text(1 + g.rng.IntN(3))
	}
	return b
}

func (g *generator) text(sentences int) string {
	var sb strings.Builder
	for s := range sentences {
		if s > 0 {
			sb.WriteByte(' ')
		}
		n := 3 + g.rng.IntN(13)
		for i := range n {
			w := words[g.rng.IntN(len(words))]
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			} else {
				sb.WriteByte(' ')
			}
			sb.WriteString(w)
		}
		sb.WriteByte(g.punctuation())
	}
	return sb.String()
}

func (g *generator) punctuation() byte {
	switch g.rng.IntN(10) {
	case 0:
		return '?'
	case 1:
		return '!'
	}
	return '.'
}
