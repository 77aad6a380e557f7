package images

import (
	"bytes"
	"debug/elf"
	"fmt"
)

// Debian's busybox-static (1.35.0-4+deb12u1) reverts upstream busybox
// commit 9c143ce52 ("ash: retain envvars with bad names in initial
// environment", in every release since 1.28, so in the 1.37 of upstream's
// registry.k8s.io/e2e-test-images/busybox): its ash imports only variables
// whose names are shell identifiers from the environment it starts with, and
// the children it runs get only those. `sh -c env` then loses names like
// "p-data" or "1_MY_VAR" that Kubernetes allows and the ConfigMap and Secret
// [Conformance] specs check. KeepBadEnvNames puts upstream's test back into
// that one loop of ash's init(), so the stand-ins' sh passes on what upstream's
// does.
//
// Debian's loop (p = endofname(*envp); if (p != *envp && *p == '=')
// setvareq(*envp, VEXPORT|VTEXTFIXED)) compiles on amd64 to:
//
//	mov (%rbx),%rdi; test %rdi,%rdi; je done   ; *envp, end of environ
//	call endofname                             ; replaced ...
//	mov (%rbx),%rdi; cmp %rax,%rdi; je next
//	cmpb $'=',(%rax); jne next                 ; ... up to here
//	mov $9,%esi; call setvareq
//
// The 18 replaced bytes become upstream's if (strchr(*envp, '=')), inline so
// that nothing else moves; %rdi still holds *envp for setvareq, and %rax and
// %rcx were the call's to clobber:
//
//	mov %rdi,%rax
//	loop: mov (%rax),%cl; inc %rax
//	test %cl,%cl; je next                      ; no '=': skip, as upstream
//	cmp $'=',%cl; jne loop
//	nop
var (
	ashEnvHead = []byte{
		0x48, 0x8b, 0x3b, // mov (%rbx),%rdi
		0x48, 0x85, 0xff, // test %rdi,%rdi
		0x74, 0x22, // je done
		0xe8, // call endofname (rel32 follows)
	}
	ashEnvTail = []byte{
		0x48, 0x8b, 0x3b, // mov (%rbx),%rdi
		0x48, 0x39, 0xc7, // cmp %rax,%rdi
		0x74, 0x0f, // je next
		0x80, 0x38, 0x3d, // cmpb $0x3d,(%rax)
		0x75, 0x0a, // jne next
		0xbe, 0x09, 0x00, 0x00, 0x00, // mov $VEXPORT|VTEXTFIXED,%esi
		0xe8, // call setvareq
	}
	// ashEnvLoop replaces the call and the tail up to "mov $9,%esi"; next
	// is 28 bytes past its start, as before.
	ashEnvLoop = []byte{
		0x48, 0x89, 0xf8, // mov %rdi,%rax
		0x8a, 0x08, // loop: mov (%rax),%cl
		0x48, 0xff, 0xc0, // inc %rax
		0x84, 0xc9, // test %cl,%cl
		0x74, 0x10, // je next (+16 from 12 = 28)
		0x80, 0xf9, 0x3d, // cmp $0x3d,%cl
		0x75, 0xf2, // jne loop (-14 from 17 = 3)
		0x90, // nop
	}
)

// KeepBadEnvNames returns busybox (Debian's static amd64 build) with its ash
// passing environment variables of any name to the commands it runs, as
// upstream's busybox does (see above). It fails, rather than guess, unless
// the loop appears exactly once. A busybox for another machine is returned
// as it is: the patch is amd64 code.
func KeepBadEnvNames(busybox []byte) ([]byte, error) {
	f, err := elf.NewFile(bytes.NewReader(busybox))
	if err != nil {
		return nil, fmt.Errorf("busybox: %w", err)
	}
	if f.Machine != elf.EM_X86_64 {
		return busybox, nil
	}
	const callLen = 5 // e8 + rel32
	at := -1
	for i := 0; ; {
		j := bytes.Index(busybox[i:], ashEnvHead)
		if j < 0 {
			break
		}
		start := i + j + len(ashEnvHead) - 1 // the call's e8
		if bytes.HasPrefix(busybox[start+callLen:], ashEnvTail) {
			if at >= 0 {
				return nil, fmt.Errorf("busybox: ash's environment import loop appears more than once")
			}
			at = start
		}
		i += j + 1
	}
	if at < 0 {
		return nil, fmt.Errorf("busybox: ash's environment import loop not found (not Debian's 1.35 amd64 busybox-static?)")
	}
	out := bytes.Clone(busybox)
	copy(out[at:], ashEnvLoop)
	return out, nil
}
