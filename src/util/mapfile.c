#include "util/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"

lilac_status lilac_mapfile_open(lilac_mapfile *m, const char *path, lilac_error *err)
{
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lilac_fail(err, LILAC_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return lilac_fail(err, LILAC_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return lilac_fail(err, LILAC_E_IO, "%s: not a regular file", path);
    }
    void *p = NULL;
    if (st.st_size > 0) {
        p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return lilac_fail(err, LILAC_E_IO, "%s: cannot map: %s", path, strerror(e));
        }
    }
    close(fd); /* the mapping keeps the file alive */
    m->path = strdup(path);
    if (!m->path) {
        if (p)
            munmap(p, (size_t)st.st_size);
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    }
    m->data = p;
    m->size = (size_t)st.st_size;
    return LILAC_OK;
}

void lilac_mapfile_close(lilac_mapfile *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    free(m->path);
    memset(m, 0, sizeof *m);
}
