//! rust_decode: one decode step of an attention layer's KV cache, run from
//! Rust through sparkrt's C API (sparkrt/sparkrt_c.h, libsparkrt_c.so) with
//! no crates, as an inference engine runs it for every token:
//!
//!   fill_slots_from_block_table  the cache slots of each sequence's context
//!   reshape_and_cache            the context's keys and values into the caches
//!   fill_slots_from_block_table  the slot of each sequence's new token
//!   reshape_and_cache            the new tokens' keys and values
//!   paged_decode_attn            each new token's query over its sequence
//!
//! Three sequences (1, 37 and 100 tokens after the step), 8 query heads over
//! 2 KV heads, head_dim 64, bf16 caches in blocks of 16 tokens placed in a
//! shuffled pool. On a backend that computes (cpu, cuda, vulkan) the slots,
//! the caches (bit for bit) and the attention output are checked against a
//! float64 reference; the mock records launches and computes nothing, so
//! there every call must succeed and the output keep its poison. On every
//! backend two deliberately wrong launches must fail with the runtime's
//! exact messages.
//!
//! The inputs are random; the seed is printed, SPARKRT_EXAMPLE_SEED=<seed>
//! replays it (the C example, examples/c_decode, draws the same inputs from
//! the same seed). Exit code 0 when every check passes, 1 otherwise.
#![deny(warnings)]

use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::mem::{size_of, size_of_val, MaybeUninit};
use std::os::raw::{c_char, c_void};
use std::ptr;

/// The declarations of sparkrt/sparkrt_c.h this program uses, field for field
/// (the structs must match the C layout, so every field is declared even
/// where it is never read).
#[allow(non_camel_case_types, dead_code)]
mod ffi {
    use std::os::raw::{c_char, c_void};

    pub type SparkrtDevicePtr = u64;
    pub type SparkrtStream = u64;

    #[repr(C)]
    pub struct sparkrt_status {
        _opaque: [u8; 0],
    }
    #[repr(C)]
    pub struct sparkrt_device {
        _opaque: [u8; 0],
    }
    #[repr(C)]
    pub struct sparkrt_kernel {
        _opaque: [u8; 0],
    }

    pub const SPARKRT_C_API_MAJOR: u32 = 1;
    pub const SPARKRT_INVALID_ARGUMENT: i32 = 3;
    // SparkrtArgKind (sparkrt/plugin_api.h).
    pub const SPARKRT_ARG_PTR: i32 = 1;
    pub const SPARKRT_ARG_F32: i32 = 6;
    // sparkrt_cache_format.
    pub const SPARKRT_CACHE_BF16: i32 = 1;

    #[repr(C)]
    pub struct sparkrt_open_options {
        pub struct_size: usize,
        pub backend: *const c_char,
        pub device_index: i32,
    }

    #[repr(C)]
    pub struct sparkrt_device_properties {
        pub struct_size: usize,
        pub backend: *const c_char,
        pub plugin_path: *const c_char,
        pub plugin_version: *const c_char,
        pub name: *const c_char,
        pub architecture: *const c_char,
        pub driver: *const c_char,
        pub index: i32,
        pub multiprocessor_count: u32,
        pub total_memory: u64,
        pub warp_size: u32,
        pub max_threads_per_block: u32,
        pub max_block_dim: [u32; 3],
        pub max_grid_dim: [u32; 3],
        pub max_shared_memory_per_block: u32,
        pub max_shared_memory_per_block_optin: u32,
        pub compute_capability_major: u32,
        pub compute_capability_minor: u32,
        pub accepts_ptx: u8,
        pub accepts_cubin: u8,
        pub accepts_spirv: u8,
        pub accepts_signatures: u8,
        pub emulated: u8,
        pub has_graphs: u8,
        pub has_collectives: u8,
    }

    #[repr(C)]
    #[derive(Clone, Copy)]
    pub union sparkrt_arg_value {
        pub ptr: SparkrtDevicePtr,
        pub u32_: u32,
        pub i32_: i32,
        pub u64_: u64,
        pub i64_: i64,
        pub f32_: f32,
        pub f64_: f64,
        pub bytes: *const c_void,
    }

    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct sparkrt_arg {
        pub kind: i32,
        pub size: u32,
        pub align: u32,
        pub reserved: u32,
        pub value: sparkrt_arg_value,
    }

    #[repr(C)]
    pub struct sparkrt_launch_config {
        pub struct_size: usize,
        pub grid: [u32; 3],
        pub block: [u32; 3],
        pub shared_mem_bytes: u32,
        pub stream: SparkrtStream,
    }

    #[repr(C)]
    #[derive(Default)]
    pub struct sparkrt_fill_slots_args {
        pub struct_size: usize,
        pub slots: SparkrtDevicePtr,
        pub block_table: SparkrtDevicePtr,
        pub start_pos: u32,
        pub count: u32,
        pub block_size: u32,
    }

    #[repr(C)]
    #[derive(Default)]
    pub struct sparkrt_reshape_and_cache_args {
        pub struct_size: usize,
        pub key: SparkrtDevicePtr,
        pub value: SparkrtDevicePtr,
        pub k_cache: SparkrtDevicePtr,
        pub v_cache: SparkrtDevicePtr,
        pub slot_mapping: SparkrtDevicePtr,
        pub num_tokens: u32,
        pub num_kv_heads: u32,
        pub head_dim: u32,
        pub block_size: u32,
        pub key_stride: u32,
        pub value_stride: u32,
    }

    #[repr(C)]
    #[derive(Default)]
    pub struct sparkrt_paged_decode_args {
        pub struct_size: usize,
        pub cache_format: i32,
        pub q: SparkrtDevicePtr,
        pub k_cache: SparkrtDevicePtr,
        pub v_cache: SparkrtDevicePtr,
        pub out: SparkrtDevicePtr,
        pub block_tables: SparkrtDevicePtr,
        pub seq_lens: SparkrtDevicePtr,
        pub max_blocks_per_seq: u32,
        pub num_seqs: u32,
        pub num_q_heads: u32,
        pub num_kv_heads: u32,
        pub head_dim: u32,
        pub block_size: u32,
        pub inv_sqrt_d: f32,
        pub k_scale: f32,
        pub v_scale: f32,
        pub q_stride: u32,
        pub cache_stride: u64,
        pub sliding_window: u32,
        pub max_seq_len: u32,
        pub workspace: SparkrtDevicePtr,
        pub workspace_bytes: u64,
        pub num_splits: u32,
    }

    extern "C" {
        pub fn sparkrt_c_api_version() -> u32;
        pub fn sparkrt_version_string() -> *const c_char;
        pub fn sparkrt_status_code(status: *const sparkrt_status) -> i32;
        pub fn sparkrt_status_message(status: *const sparkrt_status) -> *const c_char;
        pub fn sparkrt_status_free(status: *mut sparkrt_status);
        pub fn sparkrt_code_name(code: i32) -> *const c_char;

        pub fn sparkrt_device_open(
            options: *const sparkrt_open_options,
            device: *mut *mut sparkrt_device,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_device_close(device: *mut sparkrt_device) -> *mut sparkrt_status;
        pub fn sparkrt_device_properties_get(
            device: *const sparkrt_device,
            out: *mut sparkrt_device_properties,
        ) -> *mut sparkrt_status;

        pub fn sparkrt_alloc(
            device: *mut sparkrt_device,
            bytes: usize,
            out: *mut SparkrtDevicePtr,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_free(
            device: *mut sparkrt_device,
            ptr: SparkrtDevicePtr,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_memset(
            device: *mut sparkrt_device,
            dst: SparkrtDevicePtr,
            value: u8,
            bytes: usize,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_copy_h2d(
            device: *mut sparkrt_device,
            src: *const c_void,
            dst: SparkrtDevicePtr,
            bytes: usize,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_copy_d2h(
            device: *mut sparkrt_device,
            src: SparkrtDevicePtr,
            dst: *mut c_void,
            bytes: usize,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_stream_synchronize(
            device: *mut sparkrt_device,
            stream: SparkrtStream,
        ) -> *mut sparkrt_status;

        pub fn sparkrt_kernel_get(
            device: *mut sparkrt_device,
            module: *const c_char,
            entry: *const c_char,
            out: *mut *mut sparkrt_kernel,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_launch(
            kernel: *mut sparkrt_kernel,
            config: *const sparkrt_launch_config,
            args: *const sparkrt_arg,
            num_args: u32,
        ) -> *mut sparkrt_status;

        pub fn sparkrt_fill_slots_from_block_table(
            device: *mut sparkrt_device,
            args: *const sparkrt_fill_slots_args,
            stream: SparkrtStream,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_reshape_and_cache(
            device: *mut sparkrt_device,
            args: *const sparkrt_reshape_and_cache_args,
            stream: SparkrtStream,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_paged_decode_attn(
            device: *mut sparkrt_device,
            args: *const sparkrt_paged_decode_args,
            stream: SparkrtStream,
        ) -> *mut sparkrt_status;
        pub fn sparkrt_paged_decode_workspace_bytes(
            num_seqs: u32,
            num_q_heads: u32,
            head_dim: u32,
            max_splits: u32,
        ) -> u64;
    }
}

/// SPARKRT_STRUCT_SIZE(type, field): the bytes of `$t` up to and including
/// `$field`, what a caller that knows `$field` as the last field passes in
/// struct_size.
macro_rules! struct_size {
    ($t:ty, $field:ident) => {{
        let probe = MaybeUninit::<$t>::uninit();
        let base = probe.as_ptr();
        // SAFETY: addr_of! takes the field's address without reading the
        // uninitialised value.
        let field = unsafe { ptr::addr_of!((*base).$field) };
        field as usize - base as usize + size_of_pointee(field)
    }};
}

fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

// ---- a small safe layer --------------------------------------------------

/// A failed call: its absl::StatusCode and message.
#[derive(Debug)]
struct Error {
    code: i32,
    message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", code_name(self.code), self.message)
    }
}

type Result<T> = std::result::Result<T, Error>;

/// A string the library owns, copied.
fn string_at(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the API returns NUL-terminated strings that outlive this call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn code_name(code: i32) -> String {
    // SAFETY: a plain call; the name is a static string.
    string_at(unsafe { ffi::sparkrt_code_name(code) })
}

/// Takes over a status the API returned: Ok for NULL, else its code and
/// message, and the status is freed.
fn check(status: *mut ffi::sparkrt_status) -> Result<()> {
    if status.is_null() {
        return Ok(());
    }
    // SAFETY: a non-NULL status is the caller's until sparkrt_status_free.
    let error = unsafe {
        Error {
            code: ffi::sparkrt_status_code(status),
            message: string_at(ffi::sparkrt_status_message(status)),
        }
    };
    unsafe { ffi::sparkrt_status_free(status) };
    Err(error)
}

/// Types whose bytes can be copied to and from the device as they are.
trait Plain: Copy {}
impl Plain for u16 {}
impl Plain for i32 {}
impl Plain for i64 {}

struct Properties {
    backend: String,
    name: String,
    plugin_path: String,
    index: i32,
}

/// An open device; closed when dropped (or by close(), which reports how).
struct Device {
    raw: *mut ffi::sparkrt_device,
}

impl Device {
    /// The device SPARKRT_BACKEND and SPARKRT_DEVICE select.
    fn open() -> Result<Device> {
        let mut raw = ptr::null_mut();
        // SAFETY: NULL options select the environment's device.
        check(unsafe { ffi::sparkrt_device_open(ptr::null(), &mut raw) })?;
        Ok(Device { raw })
    }

    fn close(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: the handle is given up here; Drop sees NULL.
        check(unsafe { ffi::sparkrt_device_close(raw) })
    }

    fn properties(&self) -> Result<Properties> {
        // SAFETY: all zeros is a valid value of the struct (NULL strings).
        let mut p: ffi::sparkrt_device_properties = unsafe { MaybeUninit::zeroed().assume_init() };
        p.struct_size = struct_size!(ffi::sparkrt_device_properties, has_collectives);
        // SAFETY: p is filled up to its struct_size; its strings live as long as the device.
        check(unsafe { ffi::sparkrt_device_properties_get(self.raw, &mut p) })?;
        Ok(Properties {
            backend: string_at(p.backend),
            name: string_at(p.name),
            plugin_path: string_at(p.plugin_path),
            index: p.index,
        })
    }

    fn alloc(&self, bytes: usize) -> Result<Buffer<'_>> {
        let mut ptr = 0;
        // SAFETY: a plain call with an out parameter.
        check(unsafe { ffi::sparkrt_alloc(self.raw, bytes, &mut ptr) })?;
        Ok(Buffer {
            dev: self,
            ptr,
            bytes,
        })
    }

    fn memset(&self, dst: &Buffer, value: u8) -> Result<()> {
        // SAFETY: the whole of a live allocation.
        check(unsafe { ffi::sparkrt_memset(self.raw, dst.ptr, value, dst.bytes) })
    }

    fn upload<T: Plain>(&self, src: &[T], dst: &Buffer) -> Result<()> {
        assert!(
            size_of_val(src) <= dst.bytes,
            "upload past the end of a buffer"
        );
        // SAFETY: src is readable for its bytes; dst holds them.
        check(unsafe {
            ffi::sparkrt_copy_h2d(
                self.raw,
                src.as_ptr() as *const c_void,
                dst.ptr,
                size_of_val(src),
            )
        })
    }

    fn download<T: Plain>(&self, src: &Buffer, dst: &mut [T]) -> Result<()> {
        assert!(
            size_of_val(dst) <= src.bytes,
            "download past the end of a buffer"
        );
        // SAFETY: dst is writable for its bytes, and any bytes are a valid T.
        check(unsafe {
            ffi::sparkrt_copy_d2h(
                self.raw,
                src.ptr,
                dst.as_mut_ptr() as *mut c_void,
                size_of_val(dst),
            )
        })
    }

    fn synchronize(&self) -> Result<()> {
        // SAFETY: a plain call.
        check(unsafe { ffi::sparkrt_stream_synchronize(self.raw, 0) })
    }

    fn kernel(&self, module: &str, entry: &str) -> Result<Kernel<'_>> {
        let module = CString::new(module).expect("a module name without NUL");
        let entry = CString::new(entry).expect("an entry name without NUL");
        let mut raw = ptr::null_mut();
        // SAFETY: NUL-terminated names that outlive the call.
        check(unsafe {
            ffi::sparkrt_kernel_get(self.raw, module.as_ptr(), entry.as_ptr(), &mut raw)
        })?;
        Ok(Kernel {
            raw,
            _device: PhantomData,
        })
    }

    fn fill_slots(&self, mut a: ffi::sparkrt_fill_slots_args) -> Result<()> {
        a.struct_size = struct_size!(ffi::sparkrt_fill_slots_args, block_size);
        // SAFETY: a complete args struct.
        check(unsafe { ffi::sparkrt_fill_slots_from_block_table(self.raw, &a, 0) })
    }

    fn reshape_and_cache(&self, mut a: ffi::sparkrt_reshape_and_cache_args) -> Result<()> {
        a.struct_size = struct_size!(ffi::sparkrt_reshape_and_cache_args, value_stride);
        // SAFETY: a complete args struct.
        check(unsafe { ffi::sparkrt_reshape_and_cache(self.raw, &a, 0) })
    }

    fn paged_decode_attn(&self, mut a: ffi::sparkrt_paged_decode_args) -> Result<()> {
        a.struct_size = struct_size!(ffi::sparkrt_paged_decode_args, num_splits);
        // SAFETY: a complete args struct.
        check(unsafe { ffi::sparkrt_paged_decode_attn(self.raw, &a, 0) })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        // SAFETY: the handle is not used after this.
        if let Err(e) = check(unsafe { ffi::sparkrt_device_close(self.raw) }) {
            eprintln!("rust_decode: closing the device failed: {}", e);
        }
    }
}

/// Device memory, freed when dropped; cannot outlive its device.
struct Buffer<'d> {
    dev: &'d Device,
    ptr: ffi::SparkrtDevicePtr,
    bytes: usize,
}

impl Buffer<'_> {
    /// The address `offset` bytes in.
    fn at(&self, offset: usize) -> ffi::SparkrtDevicePtr {
        assert!(
            offset < self.bytes,
            "offset {} past a buffer of {} bytes",
            offset,
            self.bytes
        );
        self.ptr + offset as u64
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        // SAFETY: the allocation is live and not used after this.
        if let Err(e) = check(unsafe { ffi::sparkrt_free(self.dev.raw, self.ptr) }) {
            eprintln!("rust_decode: freeing device memory failed: {}", e);
        }
    }
}

/// A resolved kernel; its device owns it.
struct Kernel<'d> {
    raw: *mut ffi::sparkrt_kernel,
    _device: PhantomData<&'d Device>,
}

impl Kernel<'_> {
    fn launch(&self, grid: [u32; 3], block: [u32; 3], args: &[ffi::sparkrt_arg]) -> Result<()> {
        let config = ffi::sparkrt_launch_config {
            struct_size: struct_size!(ffi::sparkrt_launch_config, stream),
            grid,
            block,
            shared_mem_bytes: 0,
            stream: 0,
        };
        // SAFETY: args points at args.len() arguments; their bytes are copied.
        check(unsafe { ffi::sparkrt_launch(self.raw, &config, args.as_ptr(), args.len() as u32) })
    }
}

// The header's sparkrt_arg_* helpers are static inline, so not in the
// library: these build the same values.
fn arg_ptr(v: ffi::SparkrtDevicePtr) -> ffi::sparkrt_arg {
    ffi::sparkrt_arg {
        kind: ffi::SPARKRT_ARG_PTR,
        size: 8,
        align: 8,
        reserved: 0,
        value: ffi::sparkrt_arg_value { ptr: v },
    }
}

fn arg_f32(v: f32) -> ffi::sparkrt_arg {
    ffi::sparkrt_arg {
        kind: ffi::SPARKRT_ARG_F32,
        size: 4,
        align: 4,
        reserved: 0,
        value: ffi::sparkrt_arg_value { f32_: v },
    }
}

// ---- inputs and reference --------------------------------------------------

/// splitmix64, the generator of the C example, so a seed draws the same inputs.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / 9_007_199_254_740_992.0)
    }

    fn bf16(&mut self, lo: f64, hi: f64) -> u16 {
        bf16_from_f32(self.uniform(lo, hi) as f32)
    }
}

/// Round to nearest, ties to even; NaN stays NaN.
fn bf16_from_f32(f: f32) -> u16 {
    let u = f.to_bits();
    if u & 0x7FFF_FFFF > 0x7F80_0000 {
        return 0x7FC0;
    }
    (u.wrapping_add(0x7FFF + ((u >> 16) & 1)) >> 16) as u16
}

fn bf16_to_f64(h: u16) -> f64 {
    f32::from_bits((h as u32) << 16) as f64
}

const SEQ_LENS: [u32; 3] = [1, 37, 100]; // after the step
const SEQS: usize = SEQ_LENS.len();
const Q_HEADS: usize = 8;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 64;
const BLOCK_SIZE: usize = 16;
const SPARE_BLOCKS: usize = 5; // pool blocks no sequence owns
const ROW: usize = KV_HEADS * HEAD_DIM;
/// One token's fused q, k, v row, as a QKV projection writes it.
const QKV_STRIDE: usize = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM;

struct Failures(u32);

impl Failures {
    fn check(&mut self, ok: bool, what: &str) {
        if !ok {
            eprintln!("rust_decode: check failed: {}", what);
            self.0 += 1;
        }
    }
}

/// The step's host data: each sequence's keys and values (the new token
/// last), the fused q/k/v rows of the new tokens, the block table.
struct Inputs {
    table: Vec<i32>, // [SEQS][max_blocks], -1 past each sequence's blocks
    max_blocks: usize,
    pool_blocks: usize,
    keys: Vec<Vec<u16>>,
    values: Vec<Vec<u16>>,
    qkv: Vec<u16>,
}

fn make_inputs(rng: &mut Rng) -> Inputs {
    let blocks_of: Vec<usize> = SEQ_LENS
        .iter()
        .map(|&l| (l as usize + BLOCK_SIZE - 1) / BLOCK_SIZE)
        .collect();
    let used: usize = blocks_of.iter().sum();
    let max_blocks = *blocks_of.iter().max().unwrap();
    let pool_blocks = used + SPARE_BLOCKS;
    // The pool's blocks in a random order, never the identity.
    let mut perm: Vec<i32> = (0..pool_blocks as i32).collect();
    for i in (1..pool_blocks).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    if perm[..used].iter().enumerate().all(|(i, &b)| b == i as i32) {
        perm.swap(0, 1);
    }
    let mut table = vec![-1; SEQS * max_blocks];
    let mut next = 0;
    for s in 0..SEQS {
        for b in 0..blocks_of[s] {
            table[s * max_blocks + b] = perm[next];
            next += 1;
        }
    }
    let mut keys = Vec::new();
    let mut values = Vec::new();
    for &len in SEQ_LENS.iter() {
        let mut k = Vec::with_capacity(len as usize * ROW);
        let mut v = Vec::with_capacity(len as usize * ROW);
        for _ in 0..len {
            k.extend((0..ROW).map(|_| rng.bf16(-1.0, 1.0)));
            v.extend((0..ROW).map(|_| rng.bf16(-1.0, 1.0)));
        }
        keys.push(k);
        values.push(v);
    }
    let mut qkv = Vec::with_capacity(SEQS * QKV_STRIDE);
    for s in 0..SEQS {
        let last = (SEQ_LENS[s] as usize - 1) * ROW;
        qkv.extend((0..Q_HEADS * HEAD_DIM).map(|_| rng.bf16(-2.0, 2.0)));
        qkv.extend_from_slice(&keys[s][last..last + ROW]);
        qkv.extend_from_slice(&values[s][last..last + ROW]);
    }
    Inputs {
        table,
        max_blocks,
        pool_blocks,
        keys,
        values,
        qkv,
    }
}

impl Inputs {
    /// Where token `pos` of sequence `s` lives in the caches.
    fn slot(&self, s: usize, pos: usize) -> i64 {
        self.table[s * self.max_blocks + pos / BLOCK_SIZE] as i64 * BLOCK_SIZE as i64
            + (pos % BLOCK_SIZE) as i64
    }
}

/// Softmax attention of each new token over its sequence, in float64 over
/// the bf16 inputs: [SEQS][Q_HEADS][HEAD_DIM].
fn reference(inp: &Inputs, inv_sqrt_d: f32) -> Vec<f64> {
    let mut out = vec![0.0; SEQS * Q_HEADS * HEAD_DIM];
    for s in 0..SEQS {
        let len = SEQ_LENS[s] as usize;
        for h in 0..Q_HEADS {
            let kvh = h / (Q_HEADS / KV_HEADS);
            let q = &inp.qkv[s * QKV_STRIDE + h * HEAD_DIM..][..HEAD_DIM];
            let scores: Vec<f64> = (0..len)
                .map(|t| {
                    let k = &inp.keys[s][t * ROW + kvh * HEAD_DIM..][..HEAD_DIM];
                    let dot: f64 = q
                        .iter()
                        .zip(k)
                        .map(|(&a, &b)| bf16_to_f64(a) * bf16_to_f64(b))
                        .sum();
                    dot * inv_sqrt_d as f64
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let l: f64 = p.iter().sum();
            for d in 0..HEAD_DIM {
                let acc: f64 = (0..len)
                    .map(|t| p[t] * bf16_to_f64(inp.values[s][t * ROW + kvh * HEAD_DIM + d]))
                    .sum();
                out[(s * Q_HEADS + h) * HEAD_DIM + d] = acc / l;
            }
        }
    }
    out
}

// ---- the step ----------------------------------------------------------------

fn seed_from_env() -> std::result::Result<u64, String> {
    match std::env::var("SPARKRT_EXAMPLE_SEED") {
        Ok(s) if !s.is_empty() => s
            .parse::<u64>()
            .map_err(|_| format!("SPARKRT_EXAMPLE_SEED='{}' is not a number", s)),
        _ => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            Ok(now)
        }
    }
}

/// A refused launch: INVALID_ARGUMENT with exactly `expected`.
fn expect_refused(
    failures: &mut Failures,
    kernel: &Kernel,
    args: &[ffi::sparkrt_arg],
    what: &str,
    expected: &str,
) {
    let ok = match kernel.launch([1, 1, 1], [64, 1, 1], args) {
        Ok(()) => {
            println!("{}: accepted", what);
            false
        }
        Err(e) => {
            println!("{}: {}", what, e);
            e.code == ffi::SPARKRT_INVALID_ARGUMENT && e.message == expected
        }
    };
    if !ok {
        eprintln!(
            "rust_decode: {}: expected INVALID_ARGUMENT: {}",
            what, expected
        );
    }
    failures.check(
        ok,
        "a wrong launch was not refused with the runtime's message",
    );
}

fn step(dev: &Device, seed: u64, failures: &mut Failures) -> Result<()> {
    let props = dev.properties()?;
    let mock = props.backend == "mock";
    println!(
        "device: {} {}: {} ({})",
        props.backend, props.index, props.name, props.plugin_path
    );

    let mut rng = Rng(seed);
    let inp = make_inputs(&mut rng);
    let ctx_lens: Vec<usize> = SEQ_LENS.iter().map(|&l| l as usize - 1).collect();
    let mut ctx_first = Vec::with_capacity(SEQS);
    let mut ctx_tokens = 0;
    for &n in ctx_lens.iter() {
        ctx_first.push(ctx_tokens);
        ctx_tokens += n;
    }
    let max_len = *SEQ_LENS.iter().max().unwrap();
    print!("decode step: {} sequences of", SEQS);
    for l in SEQ_LENS.iter() {
        print!(" {}", l);
    }
    println!(
        " tokens, {} query heads, {} KV heads, head_dim {}, block_size {}",
        Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE
    );
    for s in 0..SEQS {
        let row: Vec<String> = inp.table[s * inp.max_blocks..][..inp.max_blocks]
            .iter()
            .map(|b| b.to_string())
            .collect();
        println!("  block table of sequence {}: {}", s, row.join(" "));
    }
    let mut ctx_key = Vec::with_capacity(ctx_tokens * ROW);
    let mut ctx_value = Vec::with_capacity(ctx_tokens * ROW);
    for s in 0..SEQS {
        ctx_key.extend_from_slice(&inp.keys[s][..ctx_lens[s] * ROW]);
        ctx_value.extend_from_slice(&inp.values[s][..ctx_lens[s] * ROW]);
    }
    let lens: Vec<i32> = SEQ_LENS.iter().map(|&l| l as i32).collect();

    let cache_elems = inp.pool_blocks * BLOCK_SIZE * ROW;
    let out_elems = SEQS * Q_HEADS * HEAD_DIM;
    let k_cache = dev.alloc(cache_elems * 2)?;
    let v_cache = dev.alloc(cache_elems * 2)?;
    let table = dev.alloc(inp.table.len() * 4)?;
    let seq_lens = dev.alloc(SEQS * 4)?;
    let d_ctx_key = dev.alloc(ctx_key.len() * 2)?;
    let d_ctx_value = dev.alloc(ctx_value.len() * 2)?;
    let ctx_slots = dev.alloc(ctx_tokens * 8)?;
    let qkv = dev.alloc(inp.qkv.len() * 2)?;
    let step_slots = dev.alloc(SEQS * 8)?;
    let out = dev.alloc(out_elems * 2)?;
    // Split-KV's workspace: zeroed once, then good for every step.
    // SAFETY: a plain call.
    let ws_bytes = unsafe {
        ffi::sparkrt_paged_decode_workspace_bytes(SEQS as u32, Q_HEADS as u32, HEAD_DIM as u32, 0)
    };
    let workspace = if ws_bytes > 0 {
        Some(dev.alloc(ws_bytes as usize)?)
    } else {
        None
    };
    if let Some(ref ws) = workspace {
        dev.memset(ws, 0)?;
    }
    // Zeroed caches: a token read from outside its sequence shifts the softmax.
    dev.memset(&k_cache, 0)?;
    dev.memset(&v_cache, 0)?;
    // Poison: 0xFFFF is a bf16 NaN, an all-ones slot is -1 (skip the token).
    dev.memset(&out, 0xFF)?;
    dev.memset(&ctx_slots, 0xFF)?;
    dev.memset(&step_slots, 0xFF)?;
    dev.upload(&inp.table, &table)?;
    dev.upload(&lens, &seq_lens)?;
    dev.upload(&ctx_key, &d_ctx_key)?;
    dev.upload(&ctx_value, &d_ctx_value)?;
    dev.upload(&inp.qkv, &qkv)?;

    let row_of = |s: usize| table.at(s * inp.max_blocks * 4);
    // The context (every token but the last of each sequence).
    for s in 0..SEQS {
        dev.fill_slots(ffi::sparkrt_fill_slots_args {
            // An empty context launches nothing, at any address.
            slots: ctx_slots.ptr + (ctx_first[s] * 8) as u64,
            block_table: row_of(s),
            start_pos: 0,
            count: ctx_lens[s] as u32,
            block_size: BLOCK_SIZE as u32,
            ..Default::default()
        })?;
    }
    dev.reshape_and_cache(ffi::sparkrt_reshape_and_cache_args {
        key: d_ctx_key.ptr,
        value: d_ctx_value.ptr,
        k_cache: k_cache.ptr,
        v_cache: v_cache.ptr,
        slot_mapping: ctx_slots.ptr,
        num_tokens: ctx_tokens as u32,
        num_kv_heads: KV_HEADS as u32,
        head_dim: HEAD_DIM as u32,
        block_size: BLOCK_SIZE as u32,
        key_stride: ROW as u32,
        value_stride: ROW as u32,
        ..Default::default()
    })?;
    // The step: each sequence's new token.
    for s in 0..SEQS {
        dev.fill_slots(ffi::sparkrt_fill_slots_args {
            slots: step_slots.at(s * 8),
            block_table: row_of(s),
            start_pos: ctx_lens[s] as u32,
            count: 1,
            block_size: BLOCK_SIZE as u32,
            ..Default::default()
        })?;
    }
    dev.reshape_and_cache(ffi::sparkrt_reshape_and_cache_args {
        key: qkv.at(Q_HEADS * HEAD_DIM * 2),
        value: qkv.at((Q_HEADS + KV_HEADS) * HEAD_DIM * 2),
        k_cache: k_cache.ptr,
        v_cache: v_cache.ptr,
        slot_mapping: step_slots.ptr,
        num_tokens: SEQS as u32,
        num_kv_heads: KV_HEADS as u32,
        head_dim: HEAD_DIM as u32,
        block_size: BLOCK_SIZE as u32,
        key_stride: QKV_STRIDE as u32,
        value_stride: QKV_STRIDE as u32,
        ..Default::default()
    })?;
    let inv_sqrt_d = (1.0 / (HEAD_DIM as f64).sqrt()) as f32;
    dev.paged_decode_attn(ffi::sparkrt_paged_decode_args {
        cache_format: ffi::SPARKRT_CACHE_BF16,
        q: qkv.ptr,
        k_cache: k_cache.ptr,
        v_cache: v_cache.ptr,
        out: out.ptr,
        block_tables: table.ptr,
        seq_lens: seq_lens.ptr,
        max_blocks_per_seq: inp.max_blocks as u32,
        num_seqs: SEQS as u32,
        num_q_heads: Q_HEADS as u32,
        num_kv_heads: KV_HEADS as u32,
        head_dim: HEAD_DIM as u32,
        block_size: BLOCK_SIZE as u32,
        inv_sqrt_d,
        k_scale: 0.0,
        v_scale: 0.0,
        q_stride: QKV_STRIDE as u32,
        cache_stride: 0,
        sliding_window: 0,
        max_seq_len: max_len,
        workspace: workspace.as_ref().map_or(0, |w| w.ptr),
        workspace_bytes: ws_bytes,
        num_splits: 0,
        ..Default::default()
    })?;
    dev.synchronize()?;

    let mut out_back = vec![0u16; out_elems];
    dev.download(&out, &mut out_back)?;
    if mock {
        println!("mock: recorded, not computed; every call succeeded");
        let poisoned = out_back.iter().filter(|&&h| h == 0xFFFF).count();
        println!(
            "mock: output still poisoned: {} of {} values",
            poisoned, out_elems
        );
        failures.check(poisoned == out_elems, "the mock wrote the attention output");
    } else {
        let mut ctx_back = vec![0i64; ctx_tokens];
        let mut step_back = vec![0i64; SEQS];
        let mut k_back = vec![0u16; cache_elems];
        let mut v_back = vec![0u16; cache_elems];
        dev.download(&ctx_slots, &mut ctx_back)?;
        dev.download(&step_slots, &mut step_back)?;
        dev.download(&k_cache, &mut k_back)?;
        dev.download(&v_cache, &mut v_back)?;

        // The slots the device computed, against the block table.
        let mut slot_errors = 0;
        let mut written = vec![false; inp.pool_blocks * BLOCK_SIZE];
        for s in 0..SEQS {
            for pos in 0..SEQ_LENS[s] as usize {
                let want = inp.slot(s, pos);
                let got = if pos < ctx_lens[s] {
                    ctx_back[ctx_first[s] + pos]
                } else {
                    step_back[s]
                };
                if got != want {
                    if slot_errors < 5 {
                        eprintln!(
                            "rust_decode: sequence {} token {}: slot {}, expected {}",
                            s, pos, got, want
                        );
                    }
                    slot_errors += 1;
                } else {
                    written[want as usize] = true;
                }
            }
        }
        println!(
            "slot mapping: {} slots, {} wrong",
            ctx_tokens + SEQS,
            slot_errors
        );
        failures.check(
            slot_errors == 0,
            "fill_slots_from_block_table wrote wrong slots",
        );

        // The caches: each token's rows in its slot bit for bit, zeros elsewhere.
        let mut cache_errors = 0;
        if slot_errors == 0 {
            for s in 0..SEQS {
                for pos in 0..SEQ_LENS[s] as usize {
                    let slot = inp.slot(s, pos) as usize;
                    let rows = pos * ROW..(pos + 1) * ROW;
                    cache_errors +=
                        (k_back[slot * ROW..][..ROW] != inp.keys[s][rows.clone()]) as usize;
                    cache_errors += (v_back[slot * ROW..][..ROW] != inp.values[s][rows]) as usize;
                }
            }
            for slot in (0..written.len()).filter(|&slot| !written[slot]) {
                let range = slot * ROW..(slot + 1) * ROW;
                cache_errors += k_back[range.clone()].iter().filter(|&&h| h != 0).count();
                cache_errors += v_back[range].iter().filter(|&&h| h != 0).count();
            }
        }
        println!(
            "caches: {} token rows, {} differences",
            ctx_tokens + SEQS,
            cache_errors
        );
        failures.check(
            cache_errors == 0,
            "reshape_and_cache wrote wrong cache contents",
        );

        // Attention against float64 over the same bf16 inputs. The output is
        // rounded once to bf16 (half an ulp: at most 2^-8 of the value); the
        // absolute term, 2^-8 max |V|, covers the f32 arithmetic (10^-4 max |V|
        // by the contract, docs/kernels.md) and keeps the largest error the cpu
        // backend makes here under a quarter of the bound.
        let exact = reference(&inp, inv_sqrt_d);
        let max_v = inp
            .values
            .iter()
            .flatten()
            .map(|&h| bf16_to_f64(h).abs())
            .fold(0.0, f64::max);
        let abs_term = max_v / 256.0;
        let (mut max_err, mut err_ref, mut max_ratio, mut bad) = (0.0f64, 0.0, 0.0f64, 0);
        for (i, (&got, &want)) in out_back.iter().zip(exact.iter()).enumerate() {
            let got = bf16_to_f64(got);
            let err = (got - want).abs();
            let bound = want.abs() / 256.0 + abs_term;
            if !(err <= bound) {
                if bad < 5 {
                    let (s, h, d) = (
                        i / (Q_HEADS * HEAD_DIM),
                        i / HEAD_DIM % Q_HEADS,
                        i % HEAD_DIM,
                    );
                    eprintln!(
                        "rust_decode: out[{}][{}][{}] = {}, expected {} (bound {:.3e})",
                        s, h, d, got, want, bound
                    );
                }
                bad += 1;
            }
            if !(err <= max_err) {
                max_err = err;
                err_ref = want;
            }
            if !(err / bound <= max_ratio) {
                max_ratio = err / bound;
            }
        }
        println!(
            "attention: max |err| {:.3e} (at {:.4}), bound 2^-8 |ref| + 2^-8 max |V| ({:.3e}); \
             largest |err| / bound {:.3}",
            max_err, err_ref, abs_term, max_ratio
        );
        failures.check(
            bad == 0,
            "the attention output is off the float64 reference",
        );
    }

    // Two launches the runtime must refuse before anything reaches the device.
    let vadd = dev.kernel("vector_ops", "vector_add_f32")?;
    let wrong_type = [
        arg_ptr(out.ptr),
        arg_ptr(out.ptr),
        arg_ptr(out.ptr),
        arg_f32(4.0),
    ];
    expect_refused(
        failures,
        &vadd,
        &wrong_type,
        "launch with a float for a .u32",
        "vector_add_f32: parameter #3 is .u32, given f32 (float, for 'vector_add_f32_param_3'); \
         pass a uint32_t or int32_t",
    );
    expect_refused(
        failures,
        &vadd,
        &wrong_type[..3],
        "launch with an argument missing",
        "vector_add_f32: 4 parameters declared, 3 given (missing #3 .u32)",
    );
    Ok(())
}

fn run() -> i32 {
    let seed = match seed_from_env() {
        Ok(seed) => seed,
        Err(e) => {
            eprintln!("rust_decode: {}", e);
            return 1;
        }
    };
    println!("seed {} (replay: SPARKRT_EXAMPLE_SEED={})", seed, seed);
    // SAFETY: plain calls; the version string is static.
    let version = unsafe { ffi::sparkrt_c_api_version() };
    println!(
        "sparkrt {}, C API {}.{} (declared for {}.x)",
        string_at(unsafe { ffi::sparkrt_version_string() }),
        version >> 16,
        version & 0xFFFF,
        ffi::SPARKRT_C_API_MAJOR
    );
    if version >> 16 != ffi::SPARKRT_C_API_MAJOR {
        eprintln!("rust_decode: the library's C API major differs from these declarations");
        return 1;
    }

    let mut failures = Failures(0);
    let result = Device::open().and_then(|dev| {
        let stepped = step(&dev, seed, &mut failures);
        let closed = dev.close();
        stepped.and(closed)
    });
    if let Err(e) = result {
        eprintln!("rust_decode: {}", e);
        failures.0 += 1;
    }
    if failures.0 > 0 {
        eprintln!(
            "rust_decode: FAILED ({} problem(s); seed {})",
            failures.0, seed
        );
        return 1;
    }
    println!("check: passed");
    0
}

fn main() {
    std::process::exit(run());
}
