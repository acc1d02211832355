package daemon

import "os"

// testPython is the python with torch the tests' workers run
// (SCAV_TEST_PYTHON; Debian's by default).
func testPython() string {
	if p := os.Getenv("SCAV_TEST_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}
