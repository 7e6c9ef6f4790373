package main

import "strconv"

// optionalBool is a boolean flag that also remembers whether it was given:
// nil until set, so "leave it alone" stays distinct from false.
type optionalBool struct{ p **bool }

func (o optionalBool) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return strconv.FormatBool(**o.p)
}

func (o optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*o.p = &v
	return nil
}

// IsBoolFlag lets "--flag" alone mean true, as for flag.Bool.
func (o optionalBool) IsBoolFlag() bool { return true }
