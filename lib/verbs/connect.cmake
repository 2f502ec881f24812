# Out-of-band QP information exchange over TCP (perftest's format), C API in
# include/braid/connect.h. Needs only the verbs header, not the verbs library.
add_library(braid_connect STATIC ${CMAKE_CURRENT_LIST_DIR}/connect.cc)
target_include_directories(braid_connect PUBLIC ${PROJECT_SOURCE_DIR}/include)
