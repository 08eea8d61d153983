// Network descriptions and the zoo: every zoo network builds on the image sizes it is meant for
// (with known parameter counts), and each kind of mistake in a description gives an error naming
// the file, the line and the layer.
#include <gtest/gtest.h>

#include "train/cpu_backend.h"
#include "train/network.h"

namespace kiln::train {
namespace {

std::string error_of(const std::string& text, Shape image = {1, 28, 28}) {
  CpuBackend be(1);
  try {
    Network net(parse_net_description(text, "net.prototxt"), {image, 10, 4}, be);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainNetwork, ZooBuildsWithKnownParameterCounts) {
  CpuBackend be(1);
  struct Case {
    const char* name;
    Shape image;
    int64_t params;
  };
  // mlp: 784*256+256 + 256*128+128 + 128*10+10. lenet5: 156 + 2416 + 48120 + 10164 + 850.
  // resnet8: convolutions 432 + 2 * 2304 + 4608 + 9216 + 512 + 18432 + 36864 + 2048 = 76720,
  // batch norms 2 * (16 * 3 + 32 * 3 + 64 * 3) = 672, classifier 650.
  for (const Case& c :
       {Case{"mlp", {1, 28, 28}, 235146}, Case{"lenet5", {1, 28, 28}, 61706}, Case{"resnet8", {3, 32, 32}, 78042}}) {
    Network net(load_net_description(c.name), {c.image, 10, 8}, be);
    EXPECT_EQ(net.num_parameters(), c.params) << c.name;
    EXPECT_EQ(net.name(), c.name);
  }
  // The zoo adapts to the data: LeNet-5 on CIFAR-sized images, ResNet-8 on MNIST-sized ones.
  Network lenet_cifar(load_net_description("lenet5"), {{3, 32, 32}, 10, 8}, be);
  EXPECT_EQ(lenet_cifar.value_shape(7), (Shape{8, 16 * 6 * 6}));
  Network resnet_mnist(load_net_description("resnet8"), {{1, 28, 28}, 10, 8}, be);
  EXPECT_EQ(resnet_mnist.value_shape(resnet_mnist.num_values() - 1), (Shape{8, 10}));
  EXPECT_EQ(zoo_names(), (std::vector<std::string>{"lenet5", "mlp", "resnet8"}));
}

TEST(TrainNetwork, SyntaxErrorsNameLineAndColumn) {
  std::string e = error_of("name: \"x\"\nlayer { name: \"fc\" linear { out_featurs: 3 } }\n");
  EXPECT_NE(e.find("net.prototxt:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("out_featurs"), std::string::npos) << e;
  e = error_of("layer { name: \"a\" relu {} \n");
  EXPECT_NE(e.find("net.prototxt:"), std::string::npos) << e;
}

TEST(TrainNetwork, LayerErrorsNameFileLineAndLayer) {
  const std::string head = "name: \"t\"\nlayer { name: \"flat\" flatten {} }\n";
  struct Case {
    std::string layer;
    std::string expect;
  };
  for (const Case& c : {
           Case{"layer { name: \"fc\" linear {} input: \"nope\" }", "input 'nope'"},
           Case{"layer { name: \"flat\" relu {} }", "another layer has this name"},
           Case{"layer { name: \"fc\" }", "no layer kind"},
           Case{"layer { name: \"\" relu {} }", "needs a name"},
           Case{"layer { name: \"c\" conv { out_channels: 3 } }", "conv needs kernel"},
           Case{"layer { name: \"c\" conv { out_channels: 3 kernel: [1, 2, 3] } }", "one value or two"},
           Case{"layer { name: \"c\" conv { out_channels: 3 kernel: 3 } }", "takes images"},
           Case{"layer { name: \"c\" add {} }", "two or more inputs"},
           Case{"layer { name: \"c\" max_pool { kernel: 2 pad: 2 } input: \"data\" }", "smaller than the window"},
           Case{"layer { name: \"c\" conv { out_channels: 3 kernel: 40 } input: \"data\" }", "larger than"},
           Case{"layer { name: \"c\" conv { out_channels: 4 kernel: 3 groups: 3 } input: \"data\" }", "groups"},
           Case{"layer { name: \"d\" dropout { p: 1.5 } }", "[0, 1)"},
       }) {
    std::string e = error_of(head + c.layer + "\nlayer { name: \"out\" linear {} input: \"flat\" }\n");
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.layer << "\n" << e;
    EXPECT_NE(e.find("net.prototxt:3: layer '"), std::string::npos) << c.layer << "\n" << e;
  }
}

TEST(TrainNetwork, AllLayerErrorsAreReportedTogether) {
  std::string e = error_of(
      "layer { name: \"a\" conv {} }\n"
      "layer { name: \"b\" relu {} input: \"zz\" }\n"
      "layer { name: \"c\" linear {} }\n");
  EXPECT_NE(e.find("net.prototxt:1: layer 'a'"), std::string::npos) << e;
  EXPECT_NE(e.find("net.prototxt:2: layer 'b'"), std::string::npos) << e;
}

TEST(TrainNetwork, TheLastLayerMustGiveOneLogitPerClass) {
  std::string e = error_of("layer { name: \"flat\" flatten {} }\nlayer { name: \"fc\" linear { out_features: 7 } }\n");
  EXPECT_NE(e.find("net.prototxt:2: layer 'fc'"), std::string::npos) << e;
  EXPECT_NE(e.find("[4,10]"), std::string::npos) << e;
  e = error_of(
      "layer { name: \"flat\" flatten {} }\nlayer { name: \"relu\" relu {} }\n"
      "layer { name: \"fc\" linear {} input: \"flat\" }\n");
  EXPECT_NE(e.find("layer 'relu': its output is never used"), std::string::npos) << e;
}

TEST(TrainNetwork, UnknownNetNameListsTheZoo) {
  try {
    load_net_description("no_such_net");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lenet5, mlp, resnet8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::train
