// Lugh's build glue around ggml's RPC backend (ggml-rpc/ggml-rpc.cpp,
// compiled here, unchanged, with its GGML_ABORT redirected).
//
// ggml's RPC client aborts the process when a server stops answering. In a
// perl process that is the loss of everything the program holds, so here:
// - a lost or broken connection in the dispatcher thread that talks to a
//   server is recorded for that server (the socket the thread used last,
//   see rpc-transport.cpp) and the dispatcher goes on (its pending request
//   completes with no answer, and the socket is shut so that the requests
//   still queued fail at once); the session sees the record after its step
//   and reports the server as gone;
// - the calls Lugh makes to connect (lugh_rpc_add_server,
//   lugh_rpc_backend_init) turn any abort inside into an error message;
// - every other abort is ggml's own.
#include "ggml.h"
#include <cstdarg>
#include <cstdio>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/time.h>

extern "C" void lugh_rpc_abort(const char * file, int line, const char * fmt, ...);

#undef GGML_ABORT
#define GGML_ABORT(...) lugh_rpc_abort(__FILE__, __LINE__, __VA_ARGS__)

#include "ggml-rpc/ggml-rpc.cpp"

namespace {

// Set while a guarded call of Lugh's runs on this thread: an abort there
// unwinds to the call's catch.
thread_local bool lugh_guarded = false;
// the socket this thread sent to or received from last
thread_local int lugh_last_socket = -1;

struct rpc_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::mutex lugh_rpc_mutex;
// the endpoint ("host:port") of each client socket
std::map<int, std::string> lugh_rpc_sockets;
// failures seen per endpoint; "" counts those no socket could be named for
std::map<std::string, uint64_t> lugh_rpc_failure_count;
int lugh_rpc_timeout_ms = 60000;

struct guard {
    guard() { lugh_guarded = true; }
    ~guard() { lugh_guarded = false; }
};

void copy_message(const char * text, char * out, size_t out_len) {
    if (out && out_len) {
        snprintf(out, out_len, "%s", text);
    }
}

}  // namespace

extern "C" void lugh_rpc_abort(const char * file, int line, const char * fmt, ...) {
    char text[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    if (lugh_guarded) {
        throw rpc_failure(text);
    }
    if (std::string(text).rfind("Remote RPC server crashed", 0) == 0) {
        std::lock_guard<std::mutex> lock(lugh_rpc_mutex);
        auto it = lugh_rpc_sockets.find(lugh_last_socket);
        lugh_rpc_failure_count[it == lugh_rpc_sockets.end() ? std::string() : it->second]++;
        if (it != lugh_rpc_sockets.end()) {
            // what is still queued for this server fails at once instead of
            // waiting out the timeout once more per request
            shutdown(lugh_last_socket, SHUT_RDWR);
        }
        return;
    }
    ggml_abort(file, line, "%s", text);
}

extern "C" void lugh_rpc_client_socket(int fd, const char * host, int port) {
    int timeout_ms;
    {
        std::lock_guard<std::mutex> lock(lugh_rpc_mutex);
        lugh_rpc_sockets[fd] = std::string(host) + ":" + std::to_string(port);
        timeout_ms = lugh_rpc_timeout_ms;
    }
    if (timeout_ms > 0) {
        struct timeval tv;
        tv.tv_sec = timeout_ms / 1000;
        tv.tv_usec = (timeout_ms % 1000) * 1000;
        // on Linux SO_SNDTIMEO bounds connect() too
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
}

extern "C" void lugh_rpc_socket_used(int fd) {
    lugh_last_socket = fd;
}

// Failures recorded for `endpoint` ("host:port") and those not attributed
// to any server.
extern "C" uint64_t lugh_rpc_failures(const char * endpoint) {
    std::lock_guard<std::mutex> lock(lugh_rpc_mutex);
    return lugh_rpc_failure_count[endpoint] + lugh_rpc_failure_count[""];
}

extern "C" void lugh_rpc_set_timeout_ms(int timeout_ms) {
    std::lock_guard<std::mutex> lock(lugh_rpc_mutex);
    lugh_rpc_timeout_ms = timeout_ms;
}

// ggml_backend_rpc_add_server; NULL with `err` filled on failure.
extern "C" ggml_backend_reg_t lugh_rpc_add_server(const char * endpoint, char * err, size_t err_len) {
    guard g;
    try {
        ggml_backend_reg_t reg = ggml_backend_rpc_add_server(endpoint);
        if (!reg) {
            copy_message("the server has no devices", err, err_len);
        }
        return reg;
    } catch (const std::exception & e) {
        copy_message(e.what(), err, err_len);
        return nullptr;
    }
}

// ggml_backend_rpc_init (which connects); NULL with `err` filled on failure.
extern "C" ggml_backend_t lugh_rpc_backend_init(const char * endpoint, uint32_t device, char * err, size_t err_len) {
    guard g;
    try {
        return ggml_backend_rpc_init(endpoint, device);
    } catch (const std::exception & e) {
        copy_message(e.what(), err, err_len);
        return nullptr;
    }
}
