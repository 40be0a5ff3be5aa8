// Starting and supervising this host's ranks (see process_launcher.h).
//
// One thread does it all, without signal handlers: SIGINT, SIGTERM, SIGHUP
// and SIGCHLD are blocked and taken with sigtimedwait, so a signal never
// interrupts the bookkeeping half-way, and the wait doubles as the timer of
// the SIGTERM -> SIGKILL grace period. Children are started with fork +
// exec and die with the launcher (PR_SET_PDEATHSIG): see Spawn.
#include "shardrec/core/launch/process_launcher.h"

#include <netinet/in.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <optional>
#include <set>

extern char** environ;

namespace shardrec {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? "SIG" + std::string(abbrev) : "signal " + std::to_string(sig);
}

std::string ErrnoText(int err) { return std::strerror(err); }

// A port that was free a moment ago (the ranks bind it later, as torchrun's
// own choice does).
StatusOr<int> PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return InternalError("cannot pick a free port: socket: " + ErrnoText(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(fd);
    return InternalError("cannot pick a free port: " + ErrnoText(err));
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

// This process's environment with `overrides` replacing (or, with an empty
// value, removing) the variables of the same names.
std::vector<std::string> ChildEnvironment(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::set<std::string> names;
  for (const auto& [name, value] : overrides) names.insert(name);
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!names.contains(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [name, value] : overrides) {
    if (!value.empty()) env.push_back(name + "=" + value);
  }
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Restores the calling thread's signal mask and SIGCHLD's disposition on
// every way out.
class SignalStateGuard {
 public:
  SignalStateGuard() = default;
  SignalStateGuard(const SignalStateGuard&) = delete;
  SignalStateGuard& operator=(const SignalStateGuard&) = delete;
  ~SignalStateGuard() {
    if (restore_chld_) sigaction(SIGCHLD, &old_chld_, nullptr);
    if (restore_mask_) pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }

  // Blocks `set`. A SIGCHLD that is ignored (or SA_NOCLDWAIT) would have
  // the kernel reap the ranks before waitpid sees them, so it gets the
  // default disposition meanwhile.
  Status Block(const sigset_t& set) {
    struct sigaction chld {};
    if (sigaction(SIGCHLD, nullptr, &old_chld_) != 0) return InternalError("sigaction: " + ErrnoText(errno));
    if (old_chld_.sa_handler == SIG_IGN || (old_chld_.sa_flags & SA_NOCLDWAIT) != 0) {
      chld.sa_handler = SIG_DFL;
      sigemptyset(&chld.sa_mask);
      if (sigaction(SIGCHLD, &chld, nullptr) != 0) return InternalError("sigaction: " + ErrnoText(errno));
      restore_chld_ = true;
    }
    if (const int err = pthread_sigmask(SIG_BLOCK, &set, &old_mask_); err != 0) {
      return InternalError("pthread_sigmask: " + ErrnoText(err));
    }
    restore_mask_ = true;
    return Status::Ok();
  }

 private:
  sigset_t old_mask_{};
  struct sigaction old_chld_ {};
  bool restore_mask_ = false, restore_chld_ = false;
};

struct Rank {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  bool running = false;
};

class Supervisor {
 public:
  Supervisor(const LaunchSpec& spec, std::function<void(const std::string&)> log, const sigset_t& wait_set)
      : spec_(spec), log_(std::move(log)), wait_set_(wait_set) {}

  LaunchResult Run(int master_port) {
    const int world_size = spec_.nnodes * spec_.nproc_per_node;
    const int first = spec_.node_rank * spec_.nproc_per_node;
    std::string cmdline;
    for (const std::string& word : spec_.command) cmdline += (cmdline.empty() ? "" : " ") + word;
    log_("starting ranks " + std::to_string(first) + ".." + std::to_string(first + spec_.nproc_per_node - 1) + " of " +
         std::to_string(world_size) + " (rendezvous " + (spec_.rdzv.empty() ? "none" : spec_.rdzv) + ", run id " +
         (spec_.run_id.empty() ? "none" : spec_.run_id) + ", master " + spec_.master_addr + ":" +
         std::to_string(master_port) + "): " + cmdline);
    for (int i = 0; i < spec_.nproc_per_node; ++i) {
      Rank r{first + i, i};
      std::vector<std::pair<std::string, std::string>> vars = {
          {"RANK", std::to_string(r.rank)},
          {"WORLD_SIZE", std::to_string(world_size)},
          {"LOCAL_RANK", std::to_string(i)},
          {"LOCAL_WORLD_SIZE", std::to_string(spec_.nproc_per_node)},
          {"GROUP_RANK", std::to_string(spec_.node_rank)},
          {"MASTER_ADDR", spec_.master_addr},
          {"MASTER_PORT", std::to_string(master_port)},
          {"SHARDREC_RDZV", spec_.rdzv},
          {"SHARDREC_RUN_ID", spec_.run_id},
          {"TORCHELASTIC_RUN_ID", spec_.run_id}};
      vars.insert(vars.end(), spec_.extra_env.begin(), spec_.extra_env.end());
      if (const int err = Spawn(vars, &r.pid); err != 0) {
        Fail(r, "rank " + std::to_string(r.rank) + " (local rank " + std::to_string(i) + ") cannot run '" +
                    spec_.command[0] + "': " + ErrnoText(err));
        break;
      }
      r.running = true;
      ranks_.push_back(r);
    }
    Supervise();
    return result_;
  }

 private:
  // fork + exec rather than posix_spawnp, for one thing posix_spawn cannot
  // do: tie the child's life to the launcher's (PR_SET_PDEATHSIG survives
  // exec), so a launcher killed with SIGKILL does not leave ranks training
  // on their own. The child also gets its own process group (so a
  // terminal's Ctrl-C reaches the launcher, which decides) and an empty
  // signal mask (the launcher's blocked signals are its own business).
  // Between fork and exec the child calls only async-signal-safe functions;
  // an exec failure comes back as an errno through a close-on-exec pipe.
  int Spawn(const std::vector<std::pair<std::string, std::string>>& vars, pid_t* pid) {
    std::vector<std::string> argv_strings = spec_.command;
    std::vector<std::string> env_strings = ChildEnvironment(vars);
    std::vector<char*> argv = CStrings(argv_strings);
    std::vector<char*> envp = CStrings(env_strings);
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return errno;
    const pid_t launcher = getpid();
    const pid_t child = fork();
    if (child < 0) {
      const int err = errno;
      close(pipe_fds[0]);
      close(pipe_fds[1]);
      return err;
    }
    if (child == 0) {
      close(pipe_fds[0]);
      int err = 0;
      sigset_t empty;
      sigemptyset(&empty);
      // The death signal is set first, then the parent checked: a launcher
      // that died in between is caught by the check.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher) err = ESRCH;
      if (err == 0 && setpgid(0, 0) != 0) err = errno;
      if (err == 0 && sigprocmask(SIG_SETMASK, &empty, nullptr) != 0) err = errno;
      if (err == 0) {
        execvpe(argv[0], argv.data(), envp.data());
        err = errno;
      }
      (void)!write(pipe_fds[1], &err, sizeof err);
      _exit(127);
    }
    close(pipe_fds[1]);
    int err = 0;
    ssize_t got;
    do {
      got = read(pipe_fds[0], &err, sizeof err);
    } while (got < 0 && errno == EINTR);
    close(pipe_fds[0]);
    if (got == static_cast<ssize_t>(sizeof err)) {  // exec failed: reap the child, report why
      while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
      }
      return err;
    }
    *pid = child;
    return 0;
  }

  int Running() const {
    int n = 0;
    for (const Rank& r : ranks_) n += r.running ? 1 : 0;
    return n;
  }

  // To each running rank's process group, so that what a rank started
  // (a shell's children) goes too.
  void SignalRanks(int sig) {
    for (const Rank& r : ranks_) {
      if (!r.running) continue;
      if (kill(-r.pid, sig) != 0) kill(r.pid, sig);
    }
  }

  void BeginStop(int sig) {
    SignalRanks(sig);
    // A stopped rank (SIGSTOP, a debugger, Ctrl-Z) would sit on the signal
    // for the whole grace period; SIGCONT lets it act on it now.
    SignalRanks(SIGCONT);
    kill_at_ =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec_.grace_seconds));
  }

  // The first failure decides the result; the other ranks are stopped.
  void Fail(const Rank& r, const std::string& what) {
    result_.exit_code = 1;
    result_.failed_rank = r.rank;
    result_.message = what;
    log_(what);
    if (const int n = Running(); n > 0) {
      log_("stopping the other " + std::to_string(n) + " rank(s): SIGTERM, then SIGKILL after " +
           FormatSeconds(spec_.grace_seconds));
    }
    BeginStop(SIGTERM);
  }

  static std::string FormatSeconds(double s) {
    std::string text = std::to_string(s);
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
    return text + " s";
  }

  void OnExit(Rank& r, int status) {
    r.running = false;
    // Exits after the launcher asked the ranks to stop are the stop working.
    if (stopping()) return;
    const std::string who = "rank " + std::to_string(r.rank) + " (local rank " + std::to_string(r.local_rank) +
                            ", pid " + std::to_string(r.pid) + ")";
    if (WIFEXITED(status)) {
      if (WEXITSTATUS(status) == 0) return;  // done early: fine, the others go on
      Fail(r, who + " exited with code " + std::to_string(WEXITSTATUS(status)));
    } else if (WIFSIGNALED(status)) {
      const int sig = WTERMSIG(status);
      Fail(r, who + " was killed by signal " + std::to_string(sig) + " (" + SignalName(sig) + ")" +
                  (WCOREDUMP(status) ? ", core dumped" : ""));
    }
  }

  void Reap() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      const pid_t got = waitpid(r.pid, &status, WNOHANG);
      if (got == r.pid) {
        OnExit(r, status);
      } else if (got < 0 && errno == ECHILD) {
        // Reaped by someone else in this process: its status is lost.
        r.running = false;
        if (!stopping()) {
          Fail(r, "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) +
                      ") was reaped outside the launcher; its exit status is unknown");
        }
      }
    }
  }

  void OnSignal(int sig) {
    if (!stopping()) {
      result_.exit_code = 128 + sig;
      result_.message = "got " + SignalName(sig) + ": stopped the ranks";
      log_("got " + SignalName(sig) + ": passing it to the " + std::to_string(Running()) +
           " running rank(s), SIGKILL after " + FormatSeconds(spec_.grace_seconds));
      BeginStop(sig);
    } else if (!killed_) {
      log_("got " + SignalName(sig) + " again: killing the ranks");
      SignalRanks(SIGKILL);
      killed_ = true;
    }
  }

  void Supervise() {
    while (true) {
      Reap();
      if (Running() == 0) break;
      auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(1));
      if (stopping() && !killed_) {
        const auto left = *kill_at_ - Clock::now();
        if (left <= Clock::duration::zero()) {
          log_(std::to_string(Running()) + " rank(s) still running " + FormatSeconds(spec_.grace_seconds) +
               " after being asked to stop: sending SIGKILL");
          SignalRanks(SIGKILL);
          killed_ = true;
          continue;
        }
        timeout = std::min(timeout, left);
      }
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
      timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      const int sig = sigtimedwait(&wait_set_, nullptr, &ts);
      if (sig > 0 && sig != SIGCHLD) OnSignal(sig);
    }
    // A signal that came as the last rank exited is still pending; it would
    // hit the caller once the mask is restored, so it is taken here.
    const timespec zero{0, 0};
    for (int sig; (sig = sigtimedwait(&wait_set_, nullptr, &zero)) > 0;) {
      if (sig != SIGCHLD && result_.exit_code == 0) {
        result_.exit_code = 128 + sig;
        result_.message = "got " + SignalName(sig) + " as the ranks finished";
      }
    }
  }

  const LaunchSpec& spec_;
  std::function<void(const std::string&)> log_;
  sigset_t wait_set_;
  std::vector<Rank> ranks_;
  LaunchResult result_;
  // Stopping the ranks began (SIGTERM sent) exactly when a kill time is set.
  bool stopping() const { return kill_at_.has_value(); }
  bool killed_ = false;
  std::optional<Clock::time_point> kill_at_;
};

}  // namespace

StatusOr<LaunchResult> LaunchLocalRanks(const LaunchSpec& spec) {
  if (spec.command.empty() || spec.command[0].empty()) return InvalidArgumentError("launch: no command to run");
  if (spec.nproc_per_node < 1) {
    return InvalidArgumentError("launch: nproc_per_node is " + std::to_string(spec.nproc_per_node) +
                                ", must be at least 1");
  }
  if (spec.nnodes < 1) {
    return InvalidArgumentError("launch: nnodes is " + std::to_string(spec.nnodes) + ", must be at least 1");
  }
  if (spec.node_rank < 0 || spec.node_rank >= spec.nnodes) {
    return InvalidArgumentError("launch: node_rank " + std::to_string(spec.node_rank) + " is not in [0, " +
                                std::to_string(spec.nnodes) + ")");
  }
  if (!(spec.grace_seconds >= 0)) return InvalidArgumentError("launch: grace_seconds must be >= 0");
  if (spec.master_port < 0 || spec.master_port > 65535) {
    return InvalidArgumentError("launch: master_port " + std::to_string(spec.master_port) + " is not in 0..65535");
  }
  int port = spec.master_port;
  if (port == 0) {
    SR_ASSIGN_OR_RETURN(port, PickFreePort());
  }

  // Signals the caller ignores stay ignored (nohup's SIGHUP): blocking them
  // would queue them, and forwarding would undo the caller's choice.
  sigset_t wait_set;
  sigemptyset(&wait_set);
  sigaddset(&wait_set, SIGCHLD);
  for (int sig : kForwardedSignals) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) == 0 && current.sa_handler != SIG_IGN) sigaddset(&wait_set, sig);
  }
  SignalStateGuard guard;
  SR_RETURN_IF_ERROR(guard.Block(wait_set));

  std::function<void(const std::string&)> log = spec.log;
  if (!log) log = [](const std::string& line) { std::cerr << "shardrec launch: " << line << std::endl; };
  Supervisor supervisor(spec, std::move(log), wait_set);
  return supervisor.Run(port);
}

}  // namespace shardrec
