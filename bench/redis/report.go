package main

import (
	"fmt"
	"time"
)

func header() {
	fmt.Println("| impl | conc | keys | decisions/s | p50 | p99 | Redis CPU | client CPU/call | failed calls |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
}

func printRow(r result) {
	fmt.Printf("| %s | %d | %d | %.0f | %v | %v | %.0f%% | %.1fµs | %d |\n", r.name, r.conc, r.keys, r.rate(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), 100*r.redisCPU, 1e6*r.clientCPU, r.errs)
}
