package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// machine describes where the figures were taken.
type machine struct {
	cpus       int
	gomaxprocs int
	cpuModel   string
	memTotal   string
	osArch     string
	kernel     string
	goVersion  string
	pebble     string
	cgo        string
	loadStart  string
}

func describeMachine() machine {
	m := machine{
		cpus:       runtime.NumCPU(),
		gomaxprocs: runtime.GOMAXPROCS(0),
		cpuModel:   cpuModel(),
		memTotal:   memTotal(),
		osArch:     runtime.GOOS + "/" + runtime.GOARCH,
		kernel:     readTrim("/proc/sys/kernel/osrelease"),
		goVersion:  runtime.Version(),
		pebble:     "unknown",
		cgo:        "unknown",
		loadStart:  loadAverage(),
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/cockroachdb/pebble/v2" || d.Path == "github.com/cockroachdb/pebble" {
				m.pebble = d.Path + " " + d.Version
				if d.Replace != nil {
					m.pebble += " => " + d.Replace.Path + " " + d.Replace.Version
				}
			}
		}
		for _, s := range bi.Settings {
			if s.Key == "CGO_ENABLED" {
				m.cgo = s.Value
			}
		}
	}
	return m
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseFloat(fields[1], 64)
			if err != nil {
				return fields[1] + " kB"
			}
			return fmt.Sprintf("%.1f GiB", kb/(1<<20))
		}
	}
	return "unknown"
}

// loadAverage is the 1, 5 and 15 minute load average.
func loadAverage() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
