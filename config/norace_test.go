//go:build !race

package config

const raceBuild = false
