// llama.cpp's own consistency: logits of a token sequence evaluated in one
// batch (every position output) against the same tokens fed one at a time
// through the KV cache. Prints the max |difference| per position.
// usage: llama-consistency -m MODEL --fa on|off -t N id id id ...
#include "llama.h"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    const char * model_path = nullptr;
    std::string fa = "on";
    int n_threads = 2;
    std::vector<llama_token> toks;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-m") model_path = argv[++i];
        else if (a == "--fa") fa = argv[++i];
        else if (a == "-t") n_threads = atoi(argv[++i]);
        else toks.push_back(atoi(a.c_str()));
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(model_path, llama_model_default_params());
    if (!model || toks.empty()) { fprintf(stderr, "usage: -m MODEL [--fa on|off] [-t N] ids...\n"); return 1; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256; cp.n_batch = 256; cp.n_ubatch = 256; cp.n_threads = n_threads; cp.n_threads_batch = n_threads;
    cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    const size_t n = toks.size();
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (size_t i = 0; i < n; i++) {
        batch.token[i] = toks[i]; batch.pos[i] = i; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = 0; batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
    std::vector<std::vector<float>> full(n);
    for (size_t i = 0; i < n; i++) { const float * l = llama_get_logits_ith(ctx, i); full[i].assign(l, l + n_vocab); }
    llama_batch_free(batch);
    llama_memory_clear(llama_get_memory(ctx), true);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        llama_token t = toks[i];
        if (llama_decode(ctx, llama_batch_get_one(&t, 1))) { fprintf(stderr, "decode failed\n"); return 1; }
        const float * l = llama_get_logits_ith(ctx, -1);
        double d = 0;
        for (int v = 0; v < n_vocab; v++) d = std::fmax(d, std::fabs(l[v] - full[i][v]));
        worst = std::fmax(worst, d);
        printf("position %zu: max diff %.5f\n", i, d);
    }
    printf("max diff %.5f\n", worst);
    llama_free(ctx); llama_model_free(model); llama_backend_free();
}
