"""Drives a terminal program through a pseudo-terminal, as a person would:
waits for text on the screen, then types. Used by t/72_cli_chat_pty.t.

    python3 pty_drive.py SCRIPT.json -- COMMAND ARGS...

SCRIPT.json is a list of steps: {"expect": REGEX, "timeout": SECONDS} waits
until the output so far (after the previous match) matches; {"send": TEXT}
types TEXT ("\\r" is Enter, "\\u0003" Ctrl-C, "\\u0004" Ctrl-D);
{"pause": SECONDS} waits. At the end it waits for the program to exit.
Prints the whole transcript, then "EXIT <status>"; exits 3 when an expect
times out (naming the step).
"""
import json, os, pty, re, select, sys, time

def main():
    sep = sys.argv.index('--')
    steps = json.load(open(sys.argv[1]))
    cmd = sys.argv[sep + 1:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(cmd[0], cmd)
    out = b''
    seen = 0  # what earlier expects consumed

    def read(timeout):
        nonlocal out
        r, _, _ = select.select([fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(fd, 65536)
        except OSError:
            return None
        if not data:
            return None
        out += data
        return True

    def finish(status, why=''):
        sys.stdout.write(out.decode('utf-8', 'replace'))
        sys.stdout.write('\nEXIT %s%s\n' % (status, why))
        sys.exit(3 if why else 0)

    for i, step in enumerate(steps):
        if 'send' in step:
            os.write(fd, step['send'].encode('utf-8'))
        elif 'pause' in step:
            end = time.time() + step['pause']
            while time.time() < end and read(end - time.time()) is not None:
                pass
        else:
            pattern = re.compile(step['expect'].encode('utf-8'), re.S)
            deadline = time.time() + step.get('timeout', 60)
            while True:
                m = pattern.search(out, seen)
                if m:
                    seen = m.end()
                    break
                left = deadline - time.time()
                if left <= 0 or read(left) is None:
                    os.kill(pid, 9)
                    finish('killed', ' (step %d: no match for %r)' % (i, step['expect']))
    deadline = time.time() + 60
    while time.time() < deadline and read(deadline - time.time()) is not None:
        pass
    _, status = os.waitpid(pid, 0)
    finish(os.waitstatus_to_exitcode(status))

main()
