//go:build !race

package ft

const raceEnabled = false
