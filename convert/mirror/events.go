package mirror

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Event is one pushed or deleted manifest, whatever sent it.
type Event struct {
	// Action is "push", or "delete": a manifest or tag of Repository was
	// deleted (Digest and Tag say which, where the sender tells).
	Action     string `json:"action"`
	Repository string `json:"repository"`
	Tag        string `json:"tag,omitempty"`
	Digest     string `json:"digest,omitempty"`
	MediaType  string `json:"mediaType,omitempty"`
	// Host is the registry the event names (informational: the configured
	// registry address is the one used).
	Host      string `json:"host,omitempty"`
	UserAgent string `json:"userAgent,omitempty"`
}

// Payload kinds ParseNotification recognizes.
const (
	KindDistribution = "distribution" // CNCF distribution (docker-registry, Harbor's core, GitLab, …)
	KindHarbor       = "harbor"       // a Harbor project webhook
)

// ParseNotification detects the payload type from its content and returns
// the manifest pushes and the deletes it reports; other actions (pull,
// mount, blob pushes) are dropped. A body that is neither kind is an error.
func ParseNotification(body []byte) (kind string, events []Event, err error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil {
		return "", nil, fmt.Errorf("notification: not a JSON object: %w", err)
	}
	switch {
	case probe["events"] != nil:
		events, err = parseDistribution(body)
		return KindDistribution, events, err
	case probe["type"] != nil && probe["event_data"] != nil:
		events, err = parseHarbor(body)
		return KindHarbor, events, err
	case probe["specversion"] != nil && probe["type"] != nil:
		events, err = parseCloudEvent(body)
		return KindHarbor, events, err
	}
	return "", nil, errors.New("notification: neither a distribution envelope ({\"events\": …}) nor a Harbor webhook ({\"type\": …, \"event_data\": …} or a CloudEvent)")
}

// distribution's notifications/event.go, the fields used.
type distEnvelope struct {
	Events []struct {
		Action string `json:"action"`
		Target struct {
			MediaType  string `json:"mediaType"`
			Digest     string `json:"digest"`
			Repository string `json:"repository"`
			URL        string `json:"url"`
			Tag        string `json:"tag"`
		} `json:"target"`
		Request struct {
			Host      string `json:"host"`
			UserAgent string `json:"useragent"`
		} `json:"request"`
	} `json:"events"`
}

func parseDistribution(body []byte) ([]Event, error) {
	var env distEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("distribution notification: %w", err)
	}
	var out []Event
	for _, e := range env.Events {
		switch {
		case e.Action == "push" && isManifestType(e.Target.MediaType):
		case e.Action == "delete" && e.Target.Repository != "":
			// A manifest (by digest) or a tag; distribution names no
			// media type here, so blob deletes come too, and prune
			// finds nothing for them.
		default:
			continue
		}
		host := e.Request.Host
		if u, err := url.Parse(e.Target.URL); err == nil && u.Host != "" {
			host = u.Host
		}
		out = append(out, Event{Action: e.Action, Repository: e.Target.Repository, Tag: e.Target.Tag, Digest: e.Target.Digest,
			MediaType: e.Target.MediaType, Host: host, UserAgent: e.Request.UserAgent})
	}
	return out, nil
}

// Harbor's webhook payload, the fields used: its "Default" format
// ({"type": "PUSH_ARTIFACT", "event_data": …}) and its CloudEvents format
// ({"specversion": "1.0", "type": "harbor.artifact.pushed", "data": …}),
// where data is what event_data is in the other.
type harborData struct {
	Resources []struct {
		Digest      string `json:"digest"`
		Tag         string `json:"tag"`
		ResourceURL string `json:"resource_url"`
	} `json:"resources"`
	Repository struct {
		Name         string `json:"name"`
		Namespace    string `json:"namespace"`
		RepoFullName string `json:"repo_full_name"`
	} `json:"repository"`
}

func parseHarbor(body []byte) ([]Event, error) {
	var p struct {
		Type      string     `json:"type"`
		EventData harborData `json:"event_data"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("harbor webhook: %w", err)
	}
	switch p.Type {
	case "PUSH_ARTIFACT", "pushImage":
		return harborEvents("push", p.EventData)
	case "DELETE_ARTIFACT", "deleteImage":
		return harborEvents("delete", p.EventData)
	}
	return nil, nil
}

func parseCloudEvent(body []byte) ([]Event, error) {
	var p struct {
		Type string     `json:"type"`
		Data harborData `json:"data"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("CloudEvent: %w", err)
	}
	if !strings.HasPrefix(p.Type, "harbor.") {
		return nil, fmt.Errorf("CloudEvent of type %q: only Harbor's are understood", p.Type)
	}
	switch p.Type {
	case "harbor.artifact.pushed":
		return harborEvents("push", p.Data)
	case "harbor.artifact.deleted":
		return harborEvents("delete", p.Data)
	}
	return nil, nil
}

func harborEvents(action string, d harborData) ([]Event, error) {
	repo := d.Repository.RepoFullName
	if repo == "" && d.Repository.Name != "" {
		repo = strings.Trim(d.Repository.Namespace+"/"+d.Repository.Name, "/")
	}
	var out []Event
	for _, r := range d.Resources {
		e := Event{Action: action, Repository: repo, Tag: r.Tag, Digest: r.Digest}
		if strings.Contains(e.Tag, ":") {
			e.Tag = "" // Harbor names a push by digest alone with the digest as its "tag"
		}
		// resource_url is host/namespace/name:tag (or @digest).
		if host, rest, ok := strings.Cut(r.ResourceURL, "/"); ok {
			e.Host = host
			if e.Repository == "" {
				e.Repository = trimReference(rest)
			}
		}
		if e.Repository == "" {
			return nil, fmt.Errorf("harbor webhook: a resource without a repository (%q)", r.ResourceURL)
		}
		out = append(out, e)
	}
	return out, nil
}

// trimReference strips ":tag" or "@digest" from "repo:tag".
func trimReference(s string) string {
	if i := strings.IndexByte(s, '@'); i >= 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 && !strings.Contains(s[i:], "/") {
		s = s[:i]
	}
	return s
}

func isManifestType(mt string) bool {
	switch mt {
	case "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
		"application/vnd.docker.distribution.manifest.v2+json", "application/vnd.docker.distribution.manifest.list.v2+json":
		return true
	}
	return false
}
