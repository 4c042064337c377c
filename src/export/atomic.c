/* Atomic output for the exporters: a folder or a file is written under a
 * temporary name beside its target (the same parent, so on the same file
 * system) and renamed into place only once every byte is on disk (fflush,
 * fsync, close, each checked: a full disk or a file size limit is an error,
 * never a short file). Any failure removes what was written, so the target
 * is either what it was before or the complete new output. */
#include "export_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The names an export writes into its folder: an existing folder holding
 * only these is replaced without force. */
static bool export_file_name(const char *name)
{
    static const char *const names[] = {
        "config.json",         "generation_config.json", "model.safetensors",   "model.safetensors.index.json",
        "tokenizer.json",      "tokenizer_config.json",  "adapter_config.json", "adapter_model.safetensors",
        "special_tokens_map.json", "vocab.json",         "merges.txt",          "added_tokens.json",
        "chat_template.jinja", "README.md",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0) return true;
    /* save_pretrained's shards: model-00001-of-00002.safetensors */
    const char *p = name;
    if (strncmp(p, "model-", 6) != 0) return false;
    p += 6;
    for (int part = 0; part < 2; part++) {
        int digits = 0;
        while (*p >= '0' && *p <= '9') p++, digits++;
        if (digits < 5) return false;
        if (part == 0 && strncmp(p, "-of-", 4) != 0) return false;
        if (part == 0) p += 4;
    }
    return strcmp(p, ".safetensors") == 0;
}

/* malloc'd printf; NULL when out of memory. */
static char *str_join(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

/* path split into its folder (malloc'd; "." for a bare name) and its last
 * component (malloc'd), trailing slashes ignored. NULL base: path has no
 * last component ("", "/"). */
static int split_path(const char *path, char **parent, char **base)
{
    *parent = *base = NULL;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    if (b == n) return TG_OK; /* "" or "/" */
    *base = malloc(n - b + 1);
    if (b == 0)
        *parent = malloc(2);
    else
        *parent = malloc(b + 1);
    if (!*base || !*parent) {
        free(*base), free(*parent);
        *base = *parent = NULL;
        return TG_ENOMEM;
    }
    memcpy(*base, path + b, n - b);
    (*base)[n - b] = '\0';
    if (b == 0) {
        strcpy(*parent, ".");
    } else {
        size_t pl = b;
        while (pl > 1 && path[pl - 1] == '/') pl--; /* "a//b": "a" */
        memcpy(*parent, path, pl);
        (*parent)[pl] = '\0';
    }
    return TG_OK;
}

/* A name not yet taken: parent/.base.<tag>-<random>; made by make (a folder
 * or a file), which fails with EEXIST when taken. */
static uint64_t random_bits(void)
{
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 20) ^
                 (++counter * 0x9e3779b97f4a7c15u);
    /* splitmix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static char *unused_name(const char *parent, const char *base, const char *tag)
{
    char suffix[64];
    for (int tries = 0; tries < 100; tries++) {
        snprintf(suffix, sizeof suffix, ".%s-%06llx", tag, (unsigned long long)(random_bits() & 0xffffff));
        char *dot_base = str_join("/.", base, suffix);
        char *p = dot_base ? str_join(parent, dot_base, "") : NULL;
        free(dot_base);
        if (!p) return NULL;
        struct stat sb;
        if (lstat(p, &sb) != 0) {
            if (errno == ENOENT) return p;
            /* a name too long, a parent that went away: no other name helps */
            int err = errno;
            free(p);
            errno = err;
            return NULL;
        }
        free(p);
    }
    errno = EEXIST;
    return NULL;
}

/* Removes path and, for a folder, everything under it (symbolic links
 * removed, never followed). */
static void remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (!S_ISDIR(sb.st_mode)) {
        unlink(path);
        return;
    }
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char *sub = str_join(path, "/", e->d_name);
            if (sub) remove_tree(sub);
            free(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

/* Syncs a folder's entries (a rename into it) to disk; errors ignored: the
 * data itself was synced before. */
static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a folder" : S_ISREG(m) ? "a file" : S_ISLNK(m) ? "a symbolic link"
         : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "a special file";
}

/* The first entry of folder dir that an export does not write, in *other
 * (malloc'd; NULL: none), and how many there are. */
static int foreign_entries(const char *what, const char *dir, char **other, int *count)
{
    *other = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return tg_error_status(TG_EIO, "%s: cannot read the folder '%s': %s", what, dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *p = str_join(dir, "/", e->d_name);
        struct stat sb;
        bool ours = p && lstat(p, &sb) == 0 && S_ISREG(sb.st_mode) && export_file_name(e->d_name);
        free(p);
        if (ours) continue;
        if ((*count)++ == 0) *other = str_join(e->d_name, "", "");
    }
    closedir(d);
    return TG_OK;
}

/* ---- folders ------------------------------------------------------------------------------ */

/* What is at dir now: nothing, or a folder an export may replace (*mode
 * its permissions); else one line. */
static int check_target(const char *dir, bool force, const char *what, bool *exists, mode_t *mode)
{
    struct stat sb, lb;
    *exists = stat(dir, &sb) == 0;
    if (!*exists && errno != ENOENT && errno != ENOTDIR) /* ENOTDIR: the parent's check names it */
        return tg_error_status(TG_EIO, "%s: cannot reach '%s': %s", what, dir, strerror(errno));
    if (!*exists) return TG_OK;
    if (!S_ISDIR(sb.st_mode))
        return tg_error_status(TG_EINVAL, "%s: '%s' exists and is %s, not a folder", what, dir, kind_of(sb.st_mode));
    if (lstat(dir, &lb) == 0 && S_ISLNK(lb.st_mode))
        return tg_error_status(TG_EINVAL, "%s: '%s' is a symbolic link to a folder; give the folder itself", what, dir);
    *mode = sb.st_mode & 07777;
    if (force) return TG_OK;
    char *other = NULL;
    int count = 0, st = foreign_entries(what, dir, &other, &count);
    if (st == TG_OK && count > 0)
        st = tg_error_status(TG_EINVAL,
                             "%s: the folder '%s' holds '%s'%s, which an export does not write; give force "
                             "(--force) to replace the folder and everything in it",
                             what, dir, other ? other : "?", count > 1 ? " and other files" : "");
    free(other);
    return st;
}

/* A new folder parent/.base.tmp-XXXXXX under a name no one uses (mkdir
 * fails when it is taken); NULL with errno. */
static char *make_temp_dir(const char *parent, const char *base)
{
    for (int tries = 0; tries < 100; tries++) {
        char *t = unused_name(parent, base, "tmp");
        if (!t) return NULL;
        if (mkdir(t, 0777) == 0) return t;
        int err = errno;
        free(t);
        if (err != EEXIST) {
            errno = err;
            return NULL;
        }
    }
    errno = EEXIST;
    return NULL;
}

int tg__export_dir_begin(tg__export_dir *d, const char *dir, bool force, const char *what)
{
    memset(d, 0, sizeof *d);
    if (!dir || !*dir) return tg_error_status(TG_EINVAL, "%s: no folder given", what);
    char *parent, *base;
    if (split_path(dir, &parent, &base) != TG_OK) return tg_error_status(TG_ENOMEM, "%s: out of memory", what);
    if (!base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        free(parent), free(base);
        return tg_error_status(TG_EINVAL, "%s: '%s' does not name a folder to write (give its name, not / . or ..)",
                               what, dir);
    }
    bool exists = false;
    mode_t mode = 0;
    struct stat pb;
    int st = check_target(dir, force, what, &exists, &mode);
    if (st == TG_OK && stat(parent, &pb) != 0)
        st = tg_error_status(TG_EIO, "%s: cannot write '%s': its parent '%s': %s", what, dir, parent, strerror(errno));
    else if (st == TG_OK && !S_ISDIR(pb.st_mode))
        st = tg_error_status(TG_EIO, "%s: cannot write '%s': its parent '%s' is %s, not a folder", what, dir, parent,
                             kind_of(pb.st_mode));
    if (st == TG_OK && !(d->dir = str_join(dir, "", "")))
        st = tg_error_status(TG_ENOMEM, "%s: out of memory", what);
    if (st == TG_OK && !(d->tmp = make_temp_dir(parent, base)))
        st = tg_error_status(TG_EIO, "%s: cannot write '%s': cannot create a folder in '%s': %s", what, dir, parent,
                             strerror(errno));
    if (st == TG_OK && exists) (void)chmod(d->tmp, mode); /* the folder it replaces keeps its permissions */
    free(parent), free(base);
    if (st != TG_OK) {
        free(d->dir);
        memset(d, 0, sizeof *d);
    }
    return st;
}

char *tg__export_dir_path(const tg__export_dir *d, const char *name)
{
    if (!d || !d->tmp || !name) return NULL;
    return str_join(d->tmp, "/", name);
}

int tg__export_dir_commit(tg__export_dir *d)
{
    if (!d || !d->tmp) return tg_error_status(TG_EINVAL, "export: no folder being written");
    sync_dir(d->tmp);
    char *parent = NULL, *base = NULL;
    int st = split_path(d->dir, &parent, &base);
    if (st != TG_OK || !base) {
        tg__export_dir_abort(d);
        return tg_error_status(TG_ENOMEM, "export: out of memory");
    }
    struct stat sb;
    bool exists = lstat(d->dir, &sb) == 0;
    if (exists) {
        /* moved aside, then the new folder renamed into place; on failure
         * moved back */
        d->old = unused_name(parent, base, "old");
        if (!d->old) {
            st = tg_error_status(TG_EIO, "export: cannot replace '%s': no free name beside it", d->dir);
        } else if (rename(d->dir, d->old) != 0) {
            st = tg_error_status(TG_EIO, "export: cannot replace '%s': %s", d->dir, strerror(errno));
            free(d->old);
            d->old = NULL;
        } else if (rename(d->tmp, d->dir) != 0) {
            int err = errno;
            if (rename(d->old, d->dir) == 0) {
                free(d->old);
                d->old = NULL;
            }
            st = tg_error_status(TG_EIO, "export: cannot rename the new folder to '%s': %s%s%s", d->dir, strerror(err),
                                 d->old ? "; the old one is now " : "", d->old ? d->old : "");
        } else {
            remove_tree(d->old);
        }
    } else if (rename(d->tmp, d->dir) != 0) {
        st = tg_error_status(TG_EIO, "export: cannot rename the new folder to '%s': %s", d->dir, strerror(errno));
    }
    if (st == TG_OK) {
        sync_dir(parent);
        free(d->tmp);
        d->tmp = NULL;
    }
    free(parent), free(base);
    tg__export_dir_abort(d); /* on failure removes the new folder; frees the names */
    return st;
}

void tg__export_dir_abort(tg__export_dir *d)
{
    if (!d) return;
    if (d->tmp) remove_tree(d->tmp);
    free(d->dir), free(d->tmp), free(d->old);
    memset(d, 0, sizeof *d);
}

/* ---- files -------------------------------------------------------------------------------- */

int tg__export_file_begin(tg__export_file *o, const char *path, const char *what)
{
    memset(o, 0, sizeof *o);
    if (!path || !*path) return tg_error_status(TG_EINVAL, "%s: no file given", what);
    /* "x.gguf/": no file can be renamed to it; refused before anything is written */
    if (path[strlen(path) - 1] == '/')
        return tg_error_status(TG_EINVAL, "%s: '%s' does not name a file (it ends with /)", what, path);
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (!exists && errno != ENOENT)
        return tg_error_status(TG_EIO, "%s: cannot write '%s': %s", what, path, strerror(errno));
    if (exists && !S_ISREG(sb.st_mode))
        return tg_error_status(TG_EINVAL, "%s: '%s' exists and is %s, not a regular file", what, path,
                               kind_of(sb.st_mode));
    char *parent, *base;
    if (split_path(path, &parent, &base) != TG_OK) return tg_error_status(TG_ENOMEM, "%s: out of memory", what);
    if (!base) {
        free(parent);
        return tg_error_status(TG_EINVAL, "%s: '%s' does not name a file", what, path);
    }
    int st = TG_OK, fd = -1;
    char *tmp = str_join(parent, "/.", base);
    char *tmpl = tmp ? str_join(tmp, ".tmp-", "XXXXXX") : NULL;
    free(tmp);
    o->path = str_join(path, "", "");
    if (!tmpl || !o->path) {
        st = tg_error_status(TG_ENOMEM, "%s: out of memory", what);
    } else if ((fd = mkstemp(tmpl)) < 0) {
        st = tg_error_status(TG_EIO, "%s: cannot write '%s': cannot create a file in '%s': %s", what, path, parent,
                             strerror(errno));
    } else {
        /* mkstemp makes the file 0600: the usual permissions of a new file,
         * or those of the file it replaces */
        (void)fchmod(fd, exists ? (sb.st_mode & 07777) : 0644);
        o->tmp = tmpl;
        tmpl = NULL;
        o->f = fdopen(fd, "wb");
        if (!o->f) {
            st = tg_error_status(TG_EIO, "%s: cannot write '%s': %s", what, path, strerror(errno));
            close(fd);
        }
    }
    free(tmpl), free(parent), free(base);
    if (st != TG_OK) {
        if (o->tmp) unlink(o->tmp);
        free(o->tmp), free(o->path);
        memset(o, 0, sizeof *o);
    }
    return st;
}

int tg__export_file_commit(tg__export_file *o)
{
    if (!o || !o->f) return tg_error_status(TG_EINVAL, "export: no file being written");
    /* every step checked: a write that failed earlier (ferror), the last
     * buffer (fflush: a full disk shows here), the data on disk (fsync),
     * the close */
    int err = 0;
    if (ferror(o->f)) {
        /* a write failed earlier: flushing again names why (a full disk
         * still full), or else one more byte written to the file being
         * discarded does */
        errno = 0;
        if (fflush(o->f) != 0 && errno)
            err = errno;
        else
            err = write(fileno(o->f), "", 1) < 0 ? errno : -1;
    }
    if (!err && fflush(o->f) != 0) err = errno ? errno : -1;
    if (!err && fsync(fileno(o->f)) != 0) err = errno;
    if (fclose(o->f) != 0 && !err) err = errno ? errno : -1;
    o->f = NULL;
    int st = TG_OK;
    if (err)
        st = tg_error_status(TG_EIO, "export: writing '%s' failed: %s", o->path,
                             err > 0 ? strerror(err) : "a write did not complete");
    else if (rename(o->tmp, o->path) != 0)
        st = tg_error_status(TG_EIO, "export: cannot rename the new file to '%s': %s", o->path, strerror(errno));
    if (st == TG_OK) {
        char *parent, *base;
        if (split_path(o->path, &parent, &base) == TG_OK && parent) sync_dir(parent);
        free(parent), free(base);
        free(o->tmp);
        o->tmp = NULL;
    }
    tg__export_file_abort(o); /* on failure removes the temporary file; frees the names */
    return st;
}

void tg__export_file_abort(tg__export_file *o)
{
    if (!o) return;
    if (o->f) fclose(o->f);
    if (o->tmp) unlink(o->tmp);
    free(o->path), free(o->tmp);
    memset(o, 0, sizeof *o);
}
