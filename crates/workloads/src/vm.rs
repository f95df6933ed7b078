//! Virtual machine identity from a hypervisor's command line.

use kepler_core::VmRef;

/// Recognises a QEMU/KVM process (`qemu`, `qemu-kvm`, `qemu-system-<arch>`, by the basename of
/// its first argument) and names its VM from `-uuid` and `-name`. The id is the UUID when
/// there is one, else the name; a QEMU without either is not reported as a VM, because it
/// would have no stable id. Tools such as `qemu-img` or the guest agent `qemu-ga` are not VMs.
pub fn vm_from_cmdline(args: &[String]) -> Option<VmRef> {
    let program = args.first()?;
    let base = program.rsplit('/').next().unwrap_or(program);
    if !(base == "qemu" || base == "qemu-kvm" || base.starts_with("qemu-system-")) {
        return None;
    }
    let mut uuid = None;
    let mut name = None;
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        // QEMU takes `-opt value` and `--opt value` alike.
        let option = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'));
        match option {
            Some("uuid") => uuid = rest.next().filter(|v| !v.is_empty()).cloned(),
            Some("name") => name = rest.next().and_then(|v| guest_name(v)),
            _ => {}
        }
    }
    let id = uuid.clone().or_else(|| name.clone())?;
    Some(VmRef {
        id,
        name: name.unwrap_or_default(),
        hypervisor: "kvm".to_owned(),
    })
}

/// The guest name in `-name [guest=]<name>[,process=…][,debug-threads=on]`. QEMU option
/// values escape a literal comma as `,,`; the first element may omit its `guest=` key.
fn guest_name(value: &str) -> Option<String> {
    let mut elements = Vec::new();
    let mut current = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                current.push(',');
            } else {
                elements.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    elements.push(current);
    let mut guest = None;
    for (i, element) in elements.into_iter().enumerate() {
        if let Some(name) = element.strip_prefix("guest=") {
            guest = Some(name.to_owned());
        } else if i == 0 && !element.contains('=') {
            guest = Some(element);
        }
    }
    guest.filter(|g| !g.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_owned).collect()
    }

    fn vm(id: &str, name: &str) -> Option<VmRef> {
        Some(VmRef {
            id: id.into(),
            name: name.into(),
            hypervisor: "kvm".into(),
        })
    }

    const UUID: &str = "3f2504e0-4f89-11d3-9a0c-0305e82c3301";

    #[test]
    fn hypervisor_command_lines() {
        let cases: Vec<(String, Option<VmRef>)> = vec![
            // libvirt
            (
                format!(
                    "/usr/bin/qemu-system-x86_64 -name guest=web-01,debug-threads=on -S \
                 -object secret,id=masterKey0,format=raw -machine pc-q35-7.2,usb=off \
                 -accel kvm -uuid {UUID} -no-user-config"
                ),
                vm(UUID, "web-01"),
            ),
            // RHEL's binary, plain -name, double-dash options
            (
                format!("/usr/libexec/qemu-kvm --name db --uuid {UUID} -m 2048"),
                vm(UUID, "db"),
            ),
            // No UUID: the name is the id; escaped comma; process= ignored
            (
                "qemu-system-aarch64 -name a,,b,process=qemu-ab -m 512".to_owned(),
                vm("a,b", "a,b"),
            ),
            (
                "qemu -name process=p,guest=late -m 1".to_owned(),
                vm("late", "late"),
            ),
            // UUID only
            (format!("qemu-kvm -uuid {UUID}"), vm(UUID, "")),
            // Not VMs
            ("qemu-system-x86_64 -m 512 -hda disk.img".to_owned(), None),
            ("qemu-system-x86_64 -name".to_owned(), None),
            ("qemu-img convert -O qcow2 -name x a b".to_owned(), None),
            ("/usr/sbin/qemu-ga -m virtio-serial".to_owned(), None),
            (
                format!("/usr/bin/python3 qemu-system-x86_64 -uuid {UUID}"),
                None,
            ),
            (format!("/usr/bin/myqemu-kvm -uuid {UUID}"), None),
        ];
        for (line, expected) in cases {
            assert_eq!(vm_from_cmdline(&args(&line)), expected, "{line}");
        }
        assert_eq!(vm_from_cmdline(&[]), None);
    }
}
