// Lugh's build glue around ggml's RPC transport (ggml-rpc/transport.cpp,
// compiled here, unchanged, with three of its system calls wrapped):
// - send() never raises SIGPIPE: a peer that went away is a failed send,
//   not the death of the process (perl's default for SIGPIPE);
// - send() and recv() retry when a signal interrupts them, and tell
//   rpc-client.cpp which socket the thread used last, so that a failure
//   the RPC client reports next is put down to that socket's server;
// - a client socket gets send/receive timeouts before it connects (its
//   gethostbyname call is the hook: it runs between socket() and connect()),
//   so a server that stops answering is a failure after the timeout, not a
//   hang.
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>
#include <poll.h>
#include <cerrno>

extern "C" void lugh_rpc_client_socket(int fd, const char * host, int port);
extern "C" void lugh_rpc_socket_used(int fd);

static ssize_t lugh_rpc_send(int fd, const void * data, size_t size, int flags) {
    ssize_t n;
    do {
        n = send(fd, data, size, flags | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    lugh_rpc_socket_used(fd);
    return n;
}

static ssize_t lugh_rpc_recv(int fd, void * data, size_t size, int flags) {
    ssize_t n;
    do {
        n = recv(fd, data, size, flags);
    } while (n < 0 && errno == EINTR);
    lugh_rpc_socket_used(fd);
    return n;
}

#define send(fd, data, size, flags) lugh_rpc_send(fd, data, size, flags)
#define recv(fd, data, size, flags) lugh_rpc_recv(fd, data, size, flags)
// in socket_t::connect, where `sockfd`, `host` and `port` are in scope
#define gethostbyname(name) (lugh_rpc_client_socket(sockfd, host, port), gethostbyname(name))

#include "ggml-rpc/transport.cpp"
