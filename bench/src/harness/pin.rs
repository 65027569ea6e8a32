//! Pinning the calling process to one CPU.

/// Restrict this process (its calling thread and threads it starts later)
/// to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpu >= max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond the {max} CPUs a cpu_set_t holds"),
        ));
    }
    // SAFETY: cpu_set_t is plain old data for which all-zero is the empty
    // set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes inside `set` because `cpu` < its bit count
    // (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the kernel reads exactly size_of::<cpu_set_t>() bytes from
    // `&set`, a live set of that size.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
