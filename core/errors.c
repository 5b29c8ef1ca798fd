/* errors.c — names of librecur's negative error codes (recur.h). */
#include "recur.h"

const char *recur_strerror(int err)
{
    switch (err) {
    case RECUR_OK: return "success";
    case RECUR_EINVAL: return "invalid argument";
    case RECUR_ESHAPE: return "invalid shape: a dimension is out of range or sizes overflow";
    case RECUR_ENOMEM: return "out of memory";
    case RECUR_ENONFINITE: return "non-finite value in a gate, beta, gamma or scale";
    case RECUR_ERANGE: return "value out of its domain (gate > 0, gamma outside (0,1], beta outside (0,2])";
    case RECUR_EIO: return "I/O error: file could not be opened, read or mapped";
    case RECUR_EFORMAT: return "malformed file or buffer";
    case RECUR_EMISMATCH: return "belongs to another model (fingerprint or shape mismatch)";
    case RECUR_ECHECKSUM: return "checksum mismatch";
    case RECUR_ETRUNCATED: return "truncated: shorter than its header says";
    case RECUR_ETOKEN: return "token id outside [0, vocab_size)";
    case RECUR_ECONTEXT: return "softmax KV cache would exceed max_context";
    case RECUR_ENOENT: return "not found";
    case RECUR_EISA: return "RECUR_ISA names a kernel path this CPU lacks, or an unknown one";
    default: return "unknown error";
    }
}
