// The part of Triton Inference Server's C API that libtriton_kiln.so uses, declared here from
// Triton's documented backend API (TRITONBACKEND_*, backend API 1.19) and server API
// (TRITONSERVER_*, server API 1.34; Triton 2.51). Triton's own headers ship in no package we build
// against, so only what backend.cpp calls is declared, and nothing is linked: the functions are
// resolved from the tritonserver process when it loads the backend.
//
// Conventions of that API: a function returns nullptr for success or a TRITONSERVER_Error* that
// the caller owns (TRITONSERVER_ErrorDelete). Objects are opaque; strings returned by Triton stay
// owned by the object they came from. Enum values are fixed by Triton's ABI and spelled out below.
#pragma once

#include <stddef.h>
#include <stdint.h>

// Functions Triton provides (undefined here, found in the process at load time).
#define KILN_TRITON_IMPORT __attribute__((visibility("default")))
// Functions the backend provides: the only symbols libtriton_kiln.so exports (the library is built
// with -fvisibility=hidden and a version script).
#define KILN_TRITON_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

// ---- opaque objects
struct TRITONSERVER_Error;
struct TRITONSERVER_Message;
struct TRITONBACKEND_Backend;
struct TRITONBACKEND_Model;
struct TRITONBACKEND_ModelInstance;
struct TRITONBACKEND_Request;
struct TRITONBACKEND_Response;
struct TRITONBACKEND_Input;
struct TRITONBACKEND_Output;
typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;

// The backend API version this backend is written against: Triton must offer the same major
// version and at least this minor one (checked in TRITONBACKEND_Initialize).
#define KILN_TRITONBACKEND_API_MAJOR 1
#define KILN_TRITONBACKEND_API_MINOR 19

// ---- enums (values as in Triton's ABI)
typedef enum TRITONSERVER_datatype_enum {
  TRITONSERVER_TYPE_INVALID = 0,
  TRITONSERVER_TYPE_BOOL = 1,
  TRITONSERVER_TYPE_UINT8 = 2,
  TRITONSERVER_TYPE_UINT16 = 3,
  TRITONSERVER_TYPE_UINT32 = 4,
  TRITONSERVER_TYPE_UINT64 = 5,
  TRITONSERVER_TYPE_INT8 = 6,
  TRITONSERVER_TYPE_INT16 = 7,
  TRITONSERVER_TYPE_INT32 = 8,
  TRITONSERVER_TYPE_INT64 = 9,
  TRITONSERVER_TYPE_FP16 = 10,
  TRITONSERVER_TYPE_FP32 = 11,
  TRITONSERVER_TYPE_FP64 = 12,
  TRITONSERVER_TYPE_BYTES = 13,
  TRITONSERVER_TYPE_BF16 = 14
} TRITONSERVER_DataType;

typedef enum TRITONSERVER_memorytype_enum {
  TRITONSERVER_MEMORY_CPU = 0,
  TRITONSERVER_MEMORY_CPU_PINNED = 1,
  TRITONSERVER_MEMORY_GPU = 2
} TRITONSERVER_MemoryType;

typedef enum TRITONSERVER_instancegroupkind_enum {
  TRITONSERVER_INSTANCEGROUPKIND_AUTO = 0,
  TRITONSERVER_INSTANCEGROUPKIND_CPU = 1,
  TRITONSERVER_INSTANCEGROUPKIND_GPU = 2,
  TRITONSERVER_INSTANCEGROUPKIND_MODEL = 3
} TRITONSERVER_InstanceGroupKind;

typedef enum TRITONSERVER_loglevel_enum {
  TRITONSERVER_LOG_INFO = 0,
  TRITONSERVER_LOG_WARN = 1,
  TRITONSERVER_LOG_ERROR = 2,
  TRITONSERVER_LOG_VERBOSE = 3
} TRITONSERVER_LogLevel;

typedef enum TRITONSERVER_errorcode_enum {
  TRITONSERVER_ERROR_UNKNOWN = 0,
  TRITONSERVER_ERROR_INTERNAL = 1,
  TRITONSERVER_ERROR_NOT_FOUND = 2,
  TRITONSERVER_ERROR_INVALID_ARG = 3,
  TRITONSERVER_ERROR_UNAVAILABLE = 4,
  TRITONSERVER_ERROR_UNSUPPORTED = 5,
  TRITONSERVER_ERROR_ALREADY_EXISTS = 6,
  TRITONSERVER_ERROR_CANCELLED = 7
} TRITONSERVER_Error_Code;

// Flags of TRITONBACKEND_RequestRelease: the backend is done with the request.
typedef enum tritonserver_requestreleaseflag_enum {
  TRITONSERVER_REQUEST_RELEASE_ALL = 1,
  TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
} TRITONSERVER_RequestReleaseFlag;

// Flags of TRITONBACKEND_ResponseSend: this is the request's last response.
typedef enum tritonserver_responsecompleteflag_enum {
  TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
} TRITONSERVER_ResponseCompleteFlag;

// Where a model's files are (TRITONBACKEND_ModelRepository): only a local folder is handled.
typedef enum TRITONBACKEND_artifacttype_enum { TRITONBACKEND_ARTIFACT_FILESYSTEM = 0 } TRITONBACKEND_ArtifactType;

// ---- errors
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg);
KILN_TRITON_IMPORT void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error);
KILN_TRITON_IMPORT TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error);
KILN_TRITON_IMPORT const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error);

// ---- the server's log
KILN_TRITON_IMPORT bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char* filename,
                                                               const int line, const char* msg);

// ---- messages: a model configuration as JSON text
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message** message,
                                                                                 const char* base, size_t byte_size);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message);
// base points into the message (valid while it lives), not NUL-terminated: byte_size bytes.
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* message,
                                                                           const char** base, size_t* byte_size);

// ---- backend
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_BackendName(TRITONBACKEND_Backend* backend, const char** name);

// ---- model
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelName(TRITONBACKEND_Model* model, const char** name);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* model, uint64_t* version);
// The model's folder in the repository (<repository>/<model>).
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelRepository(TRITONBACKEND_Model* model,
                                                                     TRITONBACKEND_ArtifactType* artifact_type,
                                                                     const char** location);
// config_version 1; the caller owns the message.
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelConfig(TRITONBACKEND_Model* model,
                                                                 const uint32_t config_version,
                                                                 TRITONSERVER_Message** model_config);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model* model,
                                                                             bool* auto_complete_config);
// Only from TRITONBACKEND_ModelInitialize; Triton keeps inputs, outputs, max_batch_size and the
// scheduling choice of it. The caller keeps ownership of the message.
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model* model,
                                                                    const uint32_t config_version,
                                                                    TRITONSERVER_Message* model_config);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state);

// ---- model instance
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance* instance,
                                                                       const char** name);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance* instance,
                                                                       TRITONSERVER_InstanceGroupKind* kind);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance* instance,
                                                                           int32_t* device_id);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* instance,
                                                                        TRITONBACKEND_Model** model);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* instance,
                                                                        void** state);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* instance,
                                                                           void* state);
// Timestamps in nanoseconds of std::chrono::steady_clock; per request before it is released.
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request* request, const bool success,
    const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns,
    const uint64_t exec_end_ns);
// One execution of batch_size rows (the sum of its requests' batch sizes).
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(
    TRITONBACKEND_ModelInstance* instance, const uint64_t batch_size, const uint64_t exec_start_ns,
    const uint64_t compute_start_ns, const uint64_t compute_end_ns, const uint64_t exec_end_ns);

// ---- requests and their inputs
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_RequestId(TRITONBACKEND_Request* request, const char** id);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* request, uint32_t* count);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputName(TRITONBACKEND_Request* request,
                                                                      const uint32_t index, const char** input_name);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_RequestInput(TRITONBACKEND_Request* request, const char* name,
                                                                  TRITONBACKEND_Input** input);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* request,
                                                                        uint32_t* count);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request* request,
                                                                       const uint32_t index, const char** output_name);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request,
                                                                    uint32_t release_flags);
// Any of the out-pointers may be null. The data is in buffer_count buffers (TRITONBACKEND_InputBuffer).
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* input, const char** name,
                                                                     TRITONSERVER_DataType* datatype,
                                                                     const int64_t** shape, uint32_t* dims_count,
                                                                     uint64_t* byte_size, uint32_t* buffer_count);
// memory_type / memory_type_id: the preferred memory on the way in, the buffer's on the way out.
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* input, const uint32_t index,
                                                                 const void** buffer, uint64_t* buffer_byte_size,
                                                                 TRITONSERVER_MemoryType* memory_type,
                                                                 int64_t* memory_type_id);

// ---- responses and their outputs
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response,
                                                                 TRITONBACKEND_Request* request);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response);
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* response,
                                                                    TRITONBACKEND_Output** output, const char* name,
                                                                    const TRITONSERVER_DataType datatype,
                                                                    const int64_t* shape, const uint32_t dims_count);
// memory_type / memory_type_id as for TRITONBACKEND_InputBuffer.
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* output, void** buffer,
                                                                  const uint64_t buffer_byte_size,
                                                                  TRITONSERVER_MemoryType* memory_type,
                                                                  int64_t* memory_type_id);
// Hands the response to Triton; error (nullptr: success) stays the caller's to delete.
KILN_TRITON_IMPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* response,
                                                                  const uint32_t send_flags, TRITONSERVER_Error* error);

// ---- what the backend implements (the library's only exported symbols)
KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend);
KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend);
KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model);
KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model);
KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance);
KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance);
// Triton never calls this twice at once for one instance. On success the backend owns the requests
// (it sends their responses and releases them); on an error return Triton keeps them.
KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                                          TRITONBACKEND_Request** requests,
                                                                          const uint32_t request_count);

#ifdef __cplusplus
}
#endif
