#include <stdio.h>
#include <stddef.h>
#include <cupti_activity.h>  /* KERNEL: -DKERNEL=CUpti_ActivityKernel9 (CUPTI 12.x) or ...Kernel10 (13.x) */
#define F(T, f) printf("  \"%s\": %zu,\n", #f, offsetof(T, f))
#define S(T) printf("SIZE %s %zu\n", #T, sizeof(T))
int main(void) {
    S(CUpti_ActivityAPI); F(CUpti_ActivityAPI, kind); F(CUpti_ActivityAPI, cbid); F(CUpti_ActivityAPI, start); F(CUpti_ActivityAPI, end); F(CUpti_ActivityAPI, processId); F(CUpti_ActivityAPI, threadId); F(CUpti_ActivityAPI, correlationId); F(CUpti_ActivityAPI, returnValue);
    S(KERNEL); F(KERNEL, kind); F(KERNEL, start); F(KERNEL, end); F(KERNEL, deviceId); F(KERNEL, contextId); F(KERNEL, streamId); F(KERNEL, gridX); F(KERNEL, gridY); F(KERNEL, gridZ); F(KERNEL, blockX); F(KERNEL, blockY); F(KERNEL, blockZ); F(KERNEL, correlationId); F(KERNEL, name); F(KERNEL, graphNodeId); F(KERNEL, graphId);
    S(CUpti_ActivityMemcpy6); F(CUpti_ActivityMemcpy6, copyKind); F(CUpti_ActivityMemcpy6, srcKind); F(CUpti_ActivityMemcpy6, dstKind); F(CUpti_ActivityMemcpy6, bytes); F(CUpti_ActivityMemcpy6, start); F(CUpti_ActivityMemcpy6, end); F(CUpti_ActivityMemcpy6, deviceId); F(CUpti_ActivityMemcpy6, contextId); F(CUpti_ActivityMemcpy6, streamId); F(CUpti_ActivityMemcpy6, correlationId); F(CUpti_ActivityMemcpy6, graphNodeId); F(CUpti_ActivityMemcpy6, graphId);
    S(CUpti_ActivityMemset4); F(CUpti_ActivityMemset4, value); F(CUpti_ActivityMemset4, bytes); F(CUpti_ActivityMemset4, start); F(CUpti_ActivityMemset4, end); F(CUpti_ActivityMemset4, deviceId); F(CUpti_ActivityMemset4, contextId); F(CUpti_ActivityMemset4, streamId); F(CUpti_ActivityMemset4, correlationId); F(CUpti_ActivityMemset4, memoryKind); F(CUpti_ActivityMemset4, graphNodeId); F(CUpti_ActivityMemset4, graphId);
    S(CUpti_ActivityMarker2); F(CUpti_ActivityMarker2, flags); F(CUpti_ActivityMarker2, timestamp); F(CUpti_ActivityMarker2, id); F(CUpti_ActivityMarker2, objectKind); F(CUpti_ActivityMarker2, objectId.pt.processId); F(CUpti_ActivityMarker2, objectId.pt.threadId); F(CUpti_ActivityMarker2, name); F(CUpti_ActivityMarker2, domain);
    S(CUpti_ActivitySynchronization2); F(CUpti_ActivitySynchronization2, type); F(CUpti_ActivitySynchronization2, start); F(CUpti_ActivitySynchronization2, end); F(CUpti_ActivitySynchronization2, correlationId); F(CUpti_ActivitySynchronization2, contextId); F(CUpti_ActivitySynchronization2, streamId); F(CUpti_ActivitySynchronization2, cudaEventId);
    return 0;
}
