module example.com/go-lc-server

go 1.26.0

require github.com/gpreempt/gpreempt v0.0.0

require golang.org/x/sys v0.49.0 // indirect

// Built against this checkout; a server of your own requires a released
// version instead.
replace github.com/gpreempt/gpreempt => ../..
