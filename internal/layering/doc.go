// Package layering holds the test that keeps the communication library light:
// collective, transport and flowtel must not pull in exporter, UI or GPU
// management dependencies, and imports point one way.
package layering
