// Package deploy holds the files that run the ocierofs mirror as a
// service: a systemd unit (systemd/) and Kubernetes manifests
// (kubernetes/single: one serve with its queue embedded; kubernetes/nats:
// frontends and N workers on an external NATS cluster). It is a module of
// its own so that its tests' Kubernetes API types stay out of ocierofs's
// go.mod; docs/deploy.md describes the files.
package deploy
