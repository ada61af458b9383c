// Package deploy holds no code: its tests check the files operators deploy
// with (deploy/prometheus, deploy/grafana, deploy/systemd,
// deploy/kubernetes, Dockerfile) against the server they describe. Tools
// that are missing locally (promtool, systemd-analyze, a Docker daemon)
// skip their test with a message naming what to install; .ci/run installs
// promtool.
package deploy
