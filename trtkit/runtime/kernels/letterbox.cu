// The letterbox on the GPU: Pillow's bilinear resize, the padding, and the conversion to the engine's input
// (trtkit/runtime/letterbox.py launches these).
//
// The resize is Pillow's, in Pillow's integer arithmetic: two separable passes whose taps (first input pixel, tap
// count, int32 weights with 22 fraction bits) the host computes as Pillow does (trtkit/detection/pillow_resample.py)
// and uploads; each value is clip8((2^21 + sum(w * x)) >> 22), and the first pass's output is rounded to uint8 before
// the second reads it. So the pixels are Pillow's exactly. Float outputs are (float32(x) * scale - mean) / std per
// channel, the CPU letterbox's arithmetic (each step rounded, no contraction; mean 0 and std 1 leave x * scale as
// it is); float16 ones are that, rounded to nearest even.
//
// Images are HWC, 3 channels, uint8, rows packed. The PTX next to this file is made from it by scripts/make_ptx.py
// (NVRTC, compute_60); edit this file, then run that script.

#define PRECISION_BITS 22
#define HALF (1 << (PRECISION_BITS - 1))

#define OUT_UINT8_NHWC 0
#define OUT_FLOAT32_NCHW 1
#define OUT_FLOAT16_NCHW 2

__device__ __forceinline__ unsigned char clip8(int acc)
{
    int v = acc >> PRECISION_BITS;
    return (unsigned char)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

__device__ __forceinline__ float normalized(unsigned char x, float scale, float mean, float std)
{
    return __fdiv_rn(__fsub_rn(__fmul_rn((float)x, scale), mean), std);
}

// One pass at output position j, reading `step`-apart pixels from p; the three channels into rgb.
__device__ __forceinline__ void taps(const unsigned char *__restrict__ p, int step, const int *__restrict__ first,
                                     const int *__restrict__ count, const int *__restrict__ weights, int ksize, int j,
                                     unsigned char rgb[3])
{
    const int *w = weights + (long long)j * ksize;
    int n = count[j];
    p += (long long)first[j] * step;
    int s0 = HALF, s1 = HALF, s2 = HALF;
    for (int k = 0; k < n; k++, p += step) {
        int wk = w[k];
        s0 += (int)p[0] * wk;
        s1 += (int)p[1] * wk;
        s2 += (int)p[2] * wk;
    }
    rgb[0] = clip8(s0);
    rgb[1] = clip8(s1);
    rgb[2] = clip8(s2);
}

// The first pass: src (rows x src_cols) resized along its columns (horizontal != 0: dst is rows x dst_cols) or its
// rows (dst is dst_rows x cols). One thread per dst pixel.
extern "C" __global__ void resample_pass(const unsigned char *__restrict__ src, int src_cols,
                                         unsigned char *__restrict__ dst, int dst_rows, int dst_cols,
                                         const int *__restrict__ first, const int *__restrict__ count,
                                         const int *__restrict__ weights, int ksize, int horizontal)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)dst_rows * dst_cols)
        return;
    int r = (int)(i / dst_cols), c = (int)(i % dst_cols);
    unsigned char rgb[3];
    if (horizontal)
        taps(src + (long long)r * src_cols * 3, 3, first, count, weights, ksize, c, rgb);
    else
        taps(src + (long long)c * 3, src_cols * 3, first, count, weights, ksize, r, rgb);
    dst[i * 3 + 0] = rgb[0];
    dst[i * 3 + 1] = rgb[1];
    dst[i * 3 + 2] = rgb[2];
}

// The second pass, the padding and the conversion: every pixel of one out_h x out_w letterboxed image. The image
// (new_w x new_h) sits at (pad_x, pad_y); the second pass resizes tmp (tmp_cols wide) along its columns
// (horizontal != 0) or rows into it. Elsewhere: pad_value. out: this image's slot of the engine's input batch.
extern "C" __global__ void letterbox_finish(const unsigned char *__restrict__ tmp, int tmp_cols,
                                            const int *__restrict__ first, const int *__restrict__ count,
                                            const int *__restrict__ weights, int ksize, int horizontal, int new_w,
                                            int new_h, int pad_x, int pad_y, int out_h, int out_w, int pad_value,
                                            void *__restrict__ out, int format, float scale, float mean_r,
                                            float mean_g, float mean_b, float std_r, float std_g, float std_b)
{
    const float mean[3] = {mean_r, mean_g, mean_b}, stdev[3] = {std_r, std_g, std_b};
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long plane = (long long)out_h * out_w;
    if (i >= plane)
        return;
    int y = (int)(i / out_w), x = (int)(i % out_w);
    int ry = y - pad_y, rx = x - pad_x;
    unsigned char rgb[3] = {(unsigned char)pad_value, (unsigned char)pad_value, (unsigned char)pad_value};
    if (ry >= 0 && ry < new_h && rx >= 0 && rx < new_w) {
        if (horizontal)
            taps(tmp + (long long)ry * tmp_cols * 3, 3, first, count, weights, ksize, rx, rgb);
        else
            taps(tmp + (long long)rx * 3, tmp_cols * 3, first, count, weights, ksize, ry, rgb);
    }
    if (format == OUT_UINT8_NHWC) {
        unsigned char *o = (unsigned char *)out + i * 3;
        o[0] = rgb[0];
        o[1] = rgb[1];
        o[2] = rgb[2];
    } else if (format == OUT_FLOAT32_NCHW) {
        float *o = (float *)out + i;
        for (int ch = 0; ch < 3; ch++)
            o[ch * plane] = normalized(rgb[ch], scale, mean[ch], stdev[ch]);
    } else {
        unsigned short *o = (unsigned short *)out + i;
        for (int ch = 0; ch < 3; ch++) {
            unsigned short h;
            float f = normalized(rgb[ch], scale, mean[ch], stdev[ch]);
            asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
            o[ch * plane] = h;
        }
    }
}
