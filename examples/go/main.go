// Command example uses the Go client of progressdb: it creates a thread,
// appends and edits messages, lists them page by page, attaches a file
// and reads it back, branches on an error's code, and (with an admin
// token) puts the thread under legal hold. The server is PROGRESSDB_URL (default http://127.0.0.1:8080),
// with PROGRESSDB_API_KEY and PROGRESSDB_ADMIN_TOKEN when it has them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/progressdb/progressdb/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	url := os.Getenv("PROGRESSDB_URL")
	if url == "" {
		url = "http://127.0.0.1:8080"
	}
	c, err := client.New(url,
		client.WithAPIKey(os.Getenv("PROGRESSDB_API_KEY")),
		client.WithAdminToken(os.Getenv("PROGRESSDB_ADMIN_TOKEN")),
	)
	if err != nil {
		return err
	}

	th, err := c.CreateThread(ctx, client.NewThread{Title: "Plans", Author: "ann"})
	if err != nil {
		return err
	}
	fmt.Printf("thread %s %q created at %s\n", th.Id, th.Title, th.CreatedTs.Format(time.RFC3339Nano))

	for i, text := range []string{"hi", "lunch at noon?", "sure"} {
		// A chosen ID makes the append safe to retry: a second one
		// answers id_unavailable instead of adding a copy.
		id := fmt.Sprintf("%s-m%d", th.Id, i)
		if _, err := c.AppendMessage(ctx, th.Id, client.NewMessage{Id: &id, Author: "bob", Body: map[string]any{"text": text}}); err != nil {
			return err
		}
	}
	m, err := c.EditMessage(ctx, th.Id, th.Id+"-m1", map[string]any{"text": "lunch at one?"})
	if err != nil {
		return err
	}
	fmt.Printf("message %s is at version %d\n", m.Id, m.Version)

	// The iterator fetches the pages (two messages each) as it goes.
	for m, err := range c.Messages(ctx, th.Id, client.ListOptions{Limit: 2}) {
		if err != nil {
			return err
		}
		fmt.Printf("  %s v%d %v\n", m.Id, m.Version, m.Body)
	}

	// A file streams up from any io.Reader (an *os.File, say) and back.
	a, err := c.UploadAttachment(ctx, th.Id, th.Id+"-m1", strings.NewReader("soup, bread"),
		client.UploadOptions{ContentType: "text/plain", Filename: "menu.txt"})
	if err != nil {
		return err
	}
	d, err := c.DownloadAttachment(ctx, th.Id, th.Id+"-m1", a.AttachmentId, client.DownloadOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	file, err := io.ReadAll(d)
	if err != nil {
		return err
	}
	fmt.Printf("attached %s (%d bytes): %s\n", d.Filename, a.Size, file)

	// Branch on the code, never on the message.
	_, err = c.GetThread(ctx, "no-such-thread", false)
	var apiErr *client.APIError
	switch {
	case client.IsNotFound(err):
		fmt.Println("no-such-thread: not found, as expected")
	case errors.As(err, &apiErr):
		return fmt.Errorf("unexpected answer %d %s", apiErr.Status, apiErr.Code)
	case err != nil:
		return err
	}

	if os.Getenv("PROGRESSDB_ADMIN_TOKEN") != "" {
		held, err := c.SetLegalHold(ctx, th.Id, true)
		if err != nil {
			return err
		}
		_, err = c.EditThread(ctx, th.Id, "Renamed")
		fmt.Printf("legal hold %v; renaming it answers %s\n", held.LegalHold, client.CodeOf(err))
	}
	return nil
}
