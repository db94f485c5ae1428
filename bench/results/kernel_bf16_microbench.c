#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include <omp.h>
static float lut2[16] = {0,1,2,3,4,6,8,12,-0.f,-1,-2,-3,-4,-6,-8,-12};
static float scale2[256];
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
void cur(const uint8_t*codes,const uint8_t*sc,const float*z,int G,int rows,float*out){
  const __m512 lut=_mm512_loadu_ps(lut2);
  for(int r=0;r<rows;r+=4){
    const uint8_t*c0=codes+(size_t)r*16*G,*c1=c0+16*G,*c2=c1+16*G,*c3=c2+16*G;
    const uint8_t*s0=sc+(size_t)r*G,*s1=s0+G,*s2=s1+G,*s3=s2+G;
    __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
    for(int g=0;g<G;g++){
      const __m512 ze=_mm512_loadu_ps(z+32*g),zo=_mm512_loadu_ps(z+32*g+16);
#define ROW(C,S,A) { __m512i v=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(C+16*g))); \
      __m512 d=_mm512_mul_ps(_mm512_permutexvar_ps(v,lut),ze); \
      d=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v,4),lut),zo,d); \
      A=_mm512_fmadd_ps(d,_mm512_set1_ps(scale2[S[g]]),A);}
      ROW(c0,s0,a0) ROW(c1,s1,a1) ROW(c2,s2,a2) ROW(c3,s3,a3)
    }
    out[r]=_mm512_reduce_add_ps(a0);out[r+1]=_mm512_reduce_add_ps(a1);out[r+2]=_mm512_reduce_add_ps(a2);out[r+3]=_mm512_reduce_add_ps(a3);
  }
}
static uint16_t lutbf[32];
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
void bf(const uint8_t*codes,const uint8_t*sc,const uint16_t*zb,int G,int rows,float*out){
  const __m512i lut=_mm512_loadu_si512(lutbf);
  const __m512i mul=_mm512_set1_epi32(0x1001);
  for(int r=0;r<rows;r+=4){
    const uint8_t*c0=codes+(size_t)r*16*G,*c1=c0+16*G,*c2=c1+16*G,*c3=c2+16*G;
    const uint8_t*s0=sc+(size_t)r*G,*s1=s0+G,*s2=s1+G,*s3=s2+G;
    __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
    for(int g=0;g<G;g++){
      const __m512bh zz=(__m512bh)_mm512_loadu_si512(zb+32*g);
#define ROWB(C,S,A) { __m512i v=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(C+16*g))); \
      v=_mm512_madd_epi16(v,mul); v=_mm512_permutexvar_epi16(v,lut); \
      __m512 d=_mm512_dpbf16_ps(_mm512_setzero_ps(),(__m512bh)v,zz); \
      A=_mm512_fmadd_ps(d,_mm512_set1_ps(scale2[S[g]]),A);}
      ROWB(c0,s0,a0) ROWB(c1,s1,a1) ROWB(c2,s2,a2) ROWB(c3,s3,a3)
    }
    out[r]=_mm512_reduce_add_ps(a0);out[r+1]=_mm512_reduce_add_ps(a1);out[r+2]=_mm512_reduce_add_ps(a2);out[r+3]=_mm512_reduce_add_ps(a3);
  }
}
static uint16_t f2bf(float f){uint32_t u;memcpy(&u,&f,4);u+=0x7fff+((u>>16)&1);return u>>16;}
static float bf2f(uint16_t b){uint32_t u=(uint32_t)b<<16;float f;memcpy(&f,&u,4);return f;}
int main(int argc,char**argv){
  int G=90, rows=5760; size_t mb=argc>1?atoi(argv[1]):1; // experts worth
  for(int s=0;s<256;s++)scale2[s]=ldexpf(1.0f,s-128);
  for(int i=0;i<32;i++)lutbf[i]=f2bf(lut2[i&15]);
  size_t nexp=mb; size_t cb=(size_t)rows*16*G;
  uint8_t*codes=aligned_alloc(64,cb*nexp); uint8_t*sc=aligned_alloc(64,(size_t)rows*G*nexp);
  for(size_t i=0;i<cb*nexp;i++)codes[i]=rand();
  for(size_t i=0;i<(size_t)rows*G*nexp;i++)sc[i]=120+rand()%8;
  float*z=aligned_alloc(64,4*32*G);uint16_t*zb=aligned_alloc(64,2*32*G);float*zp=aligned_alloc(64,4*32*G);
  for(int i=0;i<32*G;i++){float v=(rand()/(float)RAND_MAX-0.5f);zb[i]=f2bf(v);z[i]=bf2f(zb[i]);}
  // cur wants z permuted: ze = even elements z[2l], zo = odd
  for(int g=0;g<G;g++)for(int l=0;l<16;l++){zp[32*g+l]=z[32*g+2*l];zp[32*g+16+l]=z[32*g+2*l+1];}
  float*o1=malloc(4*rows),*o2=malloc(4*rows);
  cur(codes,sc,zp,G,rows,o1);bf(codes,sc,zb,G,rows,o2);
  int same=0;for(int i=0;i<rows;i++)same+=(memcmp(&o1[i],&o2[i],4)==0);
  printf("bit-identical rows: %d / %d\n",same,rows);
  int T=argc>2?atoi(argv[2]):1;
  for(int rep=0;rep<3;rep++){
    double g[2];
    for(int var=0;var<2;var++){
      double t0=now(); long total=0;
      #pragma omp parallel num_threads(T) reduction(+:total)
      { int id=omp_get_thread_num(); float*o=malloc(4*rows); long it=0;
        while(now()-t0<1.0){ for(size_t e=id;e<nexp;e+=T){ if(var==0)cur(codes+e*cb,sc+e*rows*G,zp,G,rows,o); else bf(codes+e*cb,sc+e*rows*G,zb,G,rows,o); it++; } }
        total+=it; free(o);}
      double t1=now(); g[var]=total*(double)(cb+rows*G)/(t1-t0)/1e9;
    }
    printf("experts %zu threads %d: cur %.2f GB/s  bf16 %.2f GB/s  x%.2f\n",nexp,T,g[0],g[1],g[1]/g[0]);
  }
}
