package labels

const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
	hexDigits   = "0123456789abcdef"
)

// NameHash returns the 32-bit FNV-1a hash of s as exactly eight lowercase hex
// digits. It names Sandboxes, pools and templates in label values, which
// must stay short and valid whatever the name.
func NameHash(s string) string {
	h := uint32(fnvOffset32)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= fnvPrime32
	}
	var out [8]byte
	for i := 7; i >= 0; i-- {
		out[i] = hexDigits[h&0xf]
		h >>= 4
	}
	return string(out[:])
}
