// Histograms of |x| on the GPU, for calibration (calibrators/device_histogram.py launches these).
//
// The binning is the one of calibrators/histogram.py, bit for bit: bin = min(trunc(|x| * scale), bins - 1) in
// float32, non-finite values skipped. The host grows each histogram's range to the batch's max |x| first (from
// absmax_f32), so |x| * scale never exceeds bins.
//
// The PTX next to this file is made from it by scripts/make_ptx.py (NVRTC, compute_60); edit this file,
// then run that script.

#define FLT_MAX_BITS 0x7f7fffffu

// out[0] = the float bits of max |x| over finite x (non-negative floats order like their unsigned bits).
extern "C" __global__ void absmax_f32(const float *__restrict__ x, unsigned long long n, unsigned int *out)
{
    unsigned int best = 0;
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned int bits = __float_as_uint(x[i]) & 0x7fffffffu;
        if (bits <= FLT_MAX_BITS && bits > best)
            best = bits;
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        best = max(best, __shfl_down_sync(0xffffffffu, best, offset));
    if ((threadIdx.x & 31) == 0 && best)
        atomicMax(out, best);
}

// counts[b] += how many finite x fall in bin b. Dynamic shared memory: bins * 4 bytes.
extern "C" __global__ void histogram_f32(const float *__restrict__ x, unsigned long long n, float scale,
                                         unsigned long long *counts, int bins)
{
    extern __shared__ unsigned int local[];
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        local[b] = 0;
    __syncthreads();
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    int lane = threadIdx.x & 31;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = fabsf(x[i]);
        bool finite = __float_as_uint(v) <= FLT_MAX_BITS;
        int bin = finite ? min(__float2int_rz(__fmul_rn(v, scale)), bins - 1) : -1;
        // Bin 0 is the hot one (ReLU zeros): a warp adds its zeros with one atomic instead of up to 32.
        unsigned int active = __activemask();
        unsigned int zeros = __ballot_sync(active, bin == 0);
        if (bin > 0)
            atomicAdd(&local[bin], 1u);
        if (zeros && lane == __ffs(active) - 1)
            atomicAdd(&local[0], (unsigned int)__popc(zeros));
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        if (local[b])
            atomicAdd(&counts[b], (unsigned long long)local[b]);
}
