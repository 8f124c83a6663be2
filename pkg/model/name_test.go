package model

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	long := strings.Repeat("a", MaxPartLen)
	tests := []struct {
		name, in string
		rule     string // "" means valid
	}{
		{"org/name", "Qwen/Qwen2.5-7B-Instruct", ""},
		{"name only", "gpt2", ""},
		{"digits", "123", ""},
		{"underscores at the ends", "_org_/_name_", ""},
		{"mixed", "user/Foo-BAR_foo.bar123", ""},
		{"96 per part", long + "/" + long, ""},
		{"empty", "", "is empty"},
		{"slash alone", "/", "namespace is empty"},
		{"dot", ".", "starts or ends"},
		{"dot dot", "..", "starts or ends"},
		{"org slash", "org/", "name is empty"},
		{"slash name", "/name", "namespace is empty"},
		{"two slashes", "a/b/c", `more than one "/"`},
		{"dot part", "org/.", "starts or ends"},
		{"dotdot part", "../etc", "starts or ends"},
		{"dotdot inside", "org/a..b", `contains ".."`},
		{"double dash", "org/a--b", `contains "--"`},
		{"leading dash", "-org/name", "starts or ends"},
		{"trailing dot", "org/name.", "starts or ends"},
		{".git", "org/name.git", `".git"`},
		{"97 characters", strings.Repeat("a", MaxPartLen+1), "at most 96"},
		{"300 characters", "org/" + strings.Repeat("x", 300), "at most 96"},
		{"long namespace", strings.Repeat("o", MaxPartLen+1) + "/m", "namespace is 97"},
		{"space", "org/my model", `" " at byte 2`},
		{"backslash", `org\name`, `"\\"`},
		{"colon", "org:name", `":"`},
		{"NUL", "org/a\x00b", `"\x00"`},
		{"newline", "org/a\nb", `"\n"`},
		{"unicode", "org/modèle", `"\xc3"`},
		{"absolute", "/etc/passwd", `more than one "/"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateName(tc.in)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("ValidateName(%q) = %v, want ok", tc.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.rule) {
				t.Fatalf("ValidateName(%q) = %v, want it to say %q", tc.in, err, tc.rule)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error is not ErrInvalid: %v", err)
			}
			if strings.ContainsAny(err.Error(), "\x00\n") {
				t.Errorf("error carries a raw control character: %q", err.Error())
			}
			if len(err.Error()) > 300 {
				t.Errorf("error is %d bytes; a hostile name must be cut", len(err.Error()))
			}
		})
	}
}

func TestValidateRevision(t *testing.T) {
	tests := []struct{ name, in, rule string }{
		{"branch", "main", ""},
		{"sha1", "0123456789abcdef0123456789abcdef01234567", ""},
		{"sha256", strings.Repeat("ab", 32), ""},
		{"tag", "v1.0.2+cu121", ""},
		{"max", strings.Repeat("r", MaxRevisionLen), ""},
		{"empty", "", "is empty"},
		{"too long", strings.Repeat("r", MaxRevisionLen+1), "at most 128"},
		{"dot", ".", "starts with"},
		{"dotdot", "..", "starts with"},
		{"slash", "refs/pr/1", `contains "/"`},
		{"traversal", "../../etc", `contains "/"`},
		{"leading dash", "-rf", "starts with"},
		{"hidden", ".staging", "starts with"},
		{"lock", "main.lock", `".lock"`},
		{"trailing dot", "v1.", `"."`},
		{"dotdot inside", "a..b", `".."`},
		{"at brace", "main@{1}", `"@"`},
		{"space", "my branch", `" "`},
		{"backslash", `a\b`, `"\\"`},
		{"NUL", "a\x00", `"\x00"`},
		{"tilde", "main~1", `"~"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateRevision(tc.in)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("ValidateRevision(%q) = %v", tc.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.rule) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("ValidateRevision(%q) = %v, want it to say %q", tc.in, err, tc.rule)
			}
		})
	}
}

func TestValidateComponent(t *testing.T) {
	for _, c := range Components {
		if err := ValidateComponent(c); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
	for _, bad := range []string{"", "VLLM", "vllm/", "../vllm", "torch", "vllm\x00"} {
		if err := ValidateComponent(bad); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateComponent(%q) = %v, want refused", bad, err)
		}
	}
}

func TestDirNameRoundTrip(t *testing.T) {
	for _, tc := range []struct{ name, dir string }{
		{"Qwen/Qwen2.5-7B-Instruct", "models--Qwen--Qwen2.5-7B-Instruct"},
		{"gpt2", "models--gpt2"},
		{"a-b/c_d.e", "models--a-b--c_d.e"},
	} {
		got, err := DirName(tc.name)
		if err != nil || got != tc.dir {
			t.Errorf("DirName(%q) = %q, %v; want %q", tc.name, got, err, tc.dir)
		}
		back, err := NameFromDir(got)
		if err != nil || back != tc.name {
			t.Errorf("NameFromDir(%q) = %q, %v; want %q", got, back, err, tc.name)
		}
	}
	for _, bad := range []string{"/", ".", "org/", "a/b/c", "org/a--b"} {
		if d, err := DirName(bad); err == nil {
			t.Errorf("DirName(%q) = %q, want refused", bad, d)
		}
	}
	for _, bad := range []string{"datasets--a--b", "models--", "models--a--b--c", "models--..", "models--a--", "models----a", "models--a/b"} {
		if n, err := NameFromDir(bad); err == nil {
			t.Errorf("NameFromDir(%q) = %q, want refused", bad, n)
		}
	}
}

// FuzzDirName: whatever DirName accepts is one path component that NameFromDir maps back exactly.
func FuzzDirName(f *testing.F) {
	for _, s := range []string{"Qwen/Qwen2.5-7B", "gpt2", "a/b", "../x", "a--b", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		d, err := DirName(name)
		if err != nil {
			return
		}
		if strings.ContainsAny(d, "/\x00") || d == "." || d == ".." || len(d) > 255 {
			t.Fatalf("DirName(%q) = %q is not one safe path component", name, d)
		}
		back, err := NameFromDir(d)
		if err != nil || back != name {
			t.Fatalf("NameFromDir(DirName(%q)) = %q, %v", name, back, err)
		}
	})
}
